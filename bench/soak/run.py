"""``python -m bench soak --minutes N``: the soak (see `bench.soak`), its table and JSON.

Exit status 0 when the hard goals hold (no answer lost, no duplicate beyond QoS 1, no
event lost, every oversize request refused), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Figure
from bench.soak.figures import Result, figures, verdict
from bench.soak.ledger import Ledger
from bench.soak.mqtt_link import MqttLink
from bench.soak.plan import Plan
from bench.soak.probe import Prober
from bench.soak.rig import Rig
from bench.soak.traffic import Sender, Target, Traffic, capacity

RESULTS = Path(__file__).resolve().parents[1] / "results" / "soak.json"


def log(text: str) -> None:
    print(f"[soak {datetime.now(UTC).strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass
class FaultLog:
    done: list[tuple[float, str, str]] = field(default_factory=list)

    def add(self, t: float, name: str, outcome: str) -> None:
        self.done.append((t, name, outcome))
        log(f"fault {name}: {outcome}")


def _do(rig: Rig, name: str) -> str:
    actions = {
        "SIGHUP": rig.sighup,
        "broker restart": rig.restart_broker,
        "hot swap (PUT /v1/bundles)": rig.hot_swap_api,
        "staged release 20%": lambda: rig.stage(20),
        "staged release abort": rig.abort,
        "cloud away": rig.cloud.stop,
        "cloud back": rig.cloud.start,
        "hot swap (bundle dir)": rig.hot_swap_dir,
    }
    outcome = actions[name]()
    return "done" if outcome is None else str(outcome)


async def run_faults(rig: Rig, plan: Plan, faults: FaultLog, mqtt: MqttLink) -> None:
    began = time.perf_counter()
    for at, name in plan.schedule():
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - began)))
        start = time.perf_counter()
        try:
            outcome = await asyncio.to_thread(_do, rig, name)
        except Exception as e:  # a fault that could not be done is reported, not fatal
            outcome = f"FAILED {type(e).__name__}: {e}"
        if name == "broker restart":
            mqtt.broker_restarts.append((start, time.perf_counter()))
        faults.add(time.perf_counter() - began, name, outcome)


async def _events_in(mqtt: MqttLink, traffic: Traffic, timeout: float) -> None:
    """Wait until every event expected has come in (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not traffic.events_expected <= mqtt.events.keys():
        await asyncio.sleep(0.5)


async def _at_rest(prober: Prober, label: str) -> None:
    """A sample with no request in flight and our HTTP/gRPC connections closed (fds and
    threads comparable between two such points); the daemon is given a moment to notice
    the closed connections."""
    await asyncio.sleep(2.0)
    prober.at_rest(label)


async def soak(rig: Rig, plan: Plan, fraction: float) -> Result:
    ledger, faults = Ledger(), FaultLog()
    mqtt = MqttLink(asyncio.get_running_loop(), ledger, rig.broker.port)
    mqtt.start()
    traffic = Traffic(Target(rig.daemon.url, rig.grpc_port), ledger, mqtt)
    prober = Prober(rig.pids, rig.store_db, plan.sample_s, rig.threads)
    sampling = asyncio.create_task(prober.run())
    sender = Sender(traffic)
    try:
        ledger.phase = prober.phase = "capacity"
        cap = await capacity(traffic, plan.capacity_s)
        rate = cap * fraction
        log(f"capacity {cap:.0f} req/s (closed loop, 8 clients); soak rate {rate:.0f} req/s")
        log(f"warm-up: {plan.warmup_s:.0f} s")
        ledger.phase = prober.phase = "warm-up"
        await sender.run(rate, plan.warmup_s, abuse=False)
        await sender.drain()
        await traffic.reconnect()
        await _at_rest(prober, "rest after warm-up")
        log(f"before: {plan.before_s:.0f} s")
        ledger.phase = prober.phase = "before"
        await sender.run(rate, plan.before_s, abuse=True)
        ledger.phase = prober.phase = "during"
        log(f"during: {plan.during_s:.0f} s, {len(plan.schedule())} faults")
        await asyncio.gather(sender.run(rate, plan.during_s, abuse=True),
                             run_faults(rig, plan, faults, mqtt))  # fmt: skip
        ledger.phase = prober.phase = "settle"
        # Once the last change serves everywhere, a moment of traffic: a worker that came
        # with it has then served, and started what serving starts (its spares' thread).
        await asyncio.to_thread(rig.settled)
        await sender.run(rate, 2.0, abuse=False)
        log(f"settle: waiting for {len(sender.tasks)} requests, then the events")
        await sender.drain()
        await _events_in(mqtt, traffic, 120)
        await asyncio.sleep(3 * plan.sample_s)  # a few samples with nothing in flight
        status = await asyncio.to_thread(rig.status)
        await traffic.close()
        await _at_rest(prober, "rest at the end")
    finally:
        sampling.cancel()
        await traffic.close()
        mqtt.close()
    return Result(plan, cap, rate, ledger, prober.samples, faults.done, mqtt, traffic, status,
                  prober.fds_at, prober.threads_at, len(rig.pids()))  # fmt: skip


def _save(path: Path, figs: Sequence[Figure], meta: dict[str, Any], goals: list[Any]) -> None:
    from bench.suite import Outcome, Scenario, write  # noqa: PLC0415 - the suite's format

    outcome = Outcome(Scenario("soak", "bench.soak", "soak"), float(meta["seconds"]), list(figs))
    write([outcome], path, meta | {"goals": goals}, {})


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the run")
    parser.add_argument("--fraction", type=float, default=0.5,
                        help="rate as a share of the capacity measured first")  # fmt: skip
    parser.add_argument("--workers", type=int, default=1,
                        help="the daemon's [workers] count (1: one process)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"JSON output ({RESULTS})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.suite import Outcome, Scenario, machine, table  # noqa: PLC0415

    args = parse(argv)
    plan = Plan.of(args.minutes)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wasmgate-soak-") as tmp:
        rig = Rig(Path(tmp), args.workers)
        try:
            rig.start()
            result = asyncio.run(soak(rig, plan, args.fraction))
        finally:
            rig.close()
    seconds = time.perf_counter() - began
    figs = figures(result)
    goals = verdict(result)
    workers = f" --workers {args.workers}" if args.workers != 1 else ""
    command = f"python -m bench soak --minutes {args.minutes:g}{workers}"
    meta = {"command": command, "seconds": seconds,
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
            "faults": result.faults, "fds_at_rest": result.fds_at,
            "threads_at_rest": result.threads_at}  # fmt: skip
    what = f"{args.minutes:g} min, {result.rate:.0f} req/s, faults on a schedule"
    outcome = Outcome(Scenario("soak", "bench.soak", what), seconds, figs)
    print(f"{meta['command']}  ({meta['date']}, {seconds:.0f} s)")
    print(f"machine: {json.dumps(meta['machine'])}")
    print(table([outcome]))
    print("\ngoals:")
    for name, ok, detail in goals:
        print(f"  {'met    ' if ok else 'NOT MET'}  {name}: {detail}")
    _save(args.json, figs, meta, goals)
    print(f"\nJSON: {args.json}")
    hard = [ok for name, ok, _ in goals if not name.startswith("(soft)")]
    return 0 if all(hard) else 1

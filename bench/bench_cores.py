"""The adapter path against cores, concurrency and transports (issue 42's two tables).

``python -m bench.bench_cores [--quick] [--json OUT]``

One demo daemon (``wasmgate serve --demo``: the digits adapter, a fresh instance per
request, and its model ``digits-mlp``) behind a stock mosquitto.

- HTTP: ``wrk`` pinned to CPU 0 drives the raw adapter (``/v1/adapters/digits``, sandboxed)
  and the V2 JSON model path (``/v2/models/digits-mlp/infer``) at 1 and 16 connections,
  with the daemon pinned to CPU 1 (``taskset -a -p -c 1``: every thread) and then given both
  CPUs, the two settings alternating within each round on the same process.
- MQTT 5: 1, 16 and 64 closed-loop requesters (`bench.mqtt_fanin`, a child pinned to CPU
  0; NODELAY, QoS 0) on the adapter, the model (V2 JSON) and a bare paho echo responder
  through the same broker (the transport's ceiling), the daemon on both CPUs.

The machine is shared, so every figure is a median over rounds and its baseline is measured
in the same round. Beside throughput and latency, two figures noise hardly moves: the
daemon's CPU time per request (``/proc/PID/stat``) and its context switches per request
(every thread's ``voluntary_ctxt_switches`` + ``nonvoluntary_ctxt_switches``): a GIL
hand-off between the event loop and a worker thread is a futex wait, hence a switch.
MQTT fan-in also measures order: for each request, how many requests published after it
were answered before it (0 for a FIFO path).

Last, issue 49's memory goals (`bench.cores_memory`): the gateway's total PSS with 2 and 3
workers against one process's RSS, fresh daemons.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench import cores_report as report
from bench import wrk
from bench.bench_mqtt import GATEWAY, start_echo
from bench.common import Figure, cpu_seconds, median, percentile, script_main
from bench.cores_memory import memory_figures
from bench.cores_report import (
    BOTH_CPUS,
    CLIENTS,
    CONNECTIONS,
    LOAD_CPU,
    MQTT_ONE,
    MQTT_WORKERS,
    ONE_CPU,
    TWO_DAEMONS,
    WORKERS,
    Cell,
    Key,
)
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from wasmgate.runtime.mqtt._paho_private import close_threaded

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "guest_adapters" / "examples" / "digits" / "samples" / "zero.json"
ADAPTER, MODEL = "digits", "digits-mlp"


def switches(pid: int) -> int:
    """Context switches of every thread of ``pid`` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # a thread that just ended
        total += sum(int(ln.split()[1]) for ln in text.splitlines() if "ctxt_switches" in ln)
    return total


def pin(pid: int, cpus: str) -> None:
    """Pin every thread of ``pid`` (threads started later inherit their creator's set)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True,
                   capture_output=True)  # fmt: skip


def measured(
    pid: int | Sequence[int], run: Callable[[], tuple[int, float, float, float, float]]
) -> Cell:
    """``run()`` -> (requests, seconds, p50, p99, overtaken p99), with the daemon's cost
    (summed over its processes: a supervisor and its workers)."""
    pids = [pid] if isinstance(pid, int) else list(pid)
    cpu0, sw0 = sum(map(cpu_seconds, pids)), sum(map(switches, pids))
    n, seconds, p50, p99, overtaken = run()
    cpu, sw = sum(map(cpu_seconds, pids)) - cpu0, sum(map(switches, pids)) - sw0
    return Cell(n / seconds, p50, p99, cpu / n * 1e6, sw / n, overtaken)


def v2_json() -> bytes:
    data = json.loads(SAMPLE.read_text())
    doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": data}]}
    return json.dumps(doc).encode()


def _target(daemon: Daemon, path: str) -> tuple[str, bytes]:
    if path == "adapter":
        return f"{daemon.url}/v1/adapters/{ADAPTER}", SAMPLE.read_bytes()
    return f"{daemon.url}/v2/models/{MODEL}/infer", v2_json()


def idle(daemon: Daemon, timeout: float = 30.0) -> None:
    """Until the daemon runs and queues nothing (every process's, in the gateway's
    ``/metrics``): a window must not start with the last one's requests still queued."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        busy = sum(
            float(ln.rsplit(" ", 1)[1])
            for ln in text.splitlines()
            if ln.startswith(("wasmgate_in_flight", "wasmgate_queue_depth"))
        )
        if busy == 0:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{daemon.url}: still busy after {timeout} s")


def _errors_seen(daemon: Daemon) -> str:
    """The daemon's error counters and log tail, for a cell that saw error answers (a 429
    is counted but not logged)."""
    try:
        with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        text = f"/metrics: {e}"
    counted = [ln for ln in text.splitlines() if "error" in ln and not ln.startswith("#")]
    return "\n".join(["daemon error counters:", *counted, "daemon log:", daemon.log()[-6000:]])


def http_cell(
    daemon: Daemon, pid: int | Sequence[int], path: str, conns: int, seconds: float
) -> Cell:
    url, body = _target(daemon, path)

    def run() -> tuple[int, float, float, float, float]:
        try:
            r = wrk.run(url, body, {}, conns, seconds, cpus=LOAD_CPU, idle=lambda: idle(daemon))
        except RuntimeError as e:  # the daemon says what the error answers were
            raise RuntimeError(f"{e}\n{_errors_seen(daemon)}") from None
        return r.requests, r.requests / r.rps, r.p50, r.p99, 0.0

    return measured(pid, run)


def http_rounds(root: Path, broker: Broker, seconds: float, rounds: int) -> dict[Key, list[Cell]]:
    """Every HTTP cell ``rounds`` times, each on a fresh daemon started under ``taskset``
    with the cell's CPUs (as systemd's ``CPUAffinity=`` starts it: a warm process re-pinned
    between cells keeps its threads where they were, and measured 1.01x for the same
    cells), the two CPU settings side by side in each round; and the adapter at 16
    connections on two daemons, one per CPU (`two_daemons`)."""
    cells: dict[Key, list[Cell]] = {}
    for _ in range(rounds):
        for conns in CONNECTIONS:
            for path in ("adapter", "model"):
                for cpus in (ONE_CPU, BOTH_CPUS):
                    with fresh_daemon(root, broker, cpus) as (daemon, pid):
                        warm(daemon, path, conns)
                        cell = http_cell(daemon, pid, path, conns, seconds)
                    cells.setdefault((path, cpus, conns), []).append(cell)
        for path in ("adapter", "model"):
            with fresh_daemon(root, broker, BOTH_CPUS, workers=2) as (daemon, pid):
                warm(daemon, path, 16)
                pids = [pid, *_worker_pids(daemon)]
                cells.setdefault((path, WORKERS, 16), []).append(
                    http_cell(daemon, pids, path, 16, seconds)
                )
        cells.setdefault(("adapter", TWO_DAEMONS, 16), []).append(
            two_daemons(root, broker, 16, seconds)
        )
    return cells


def _worker_pids(daemon: Daemon) -> list[int]:
    workers = daemon.get_json("/v1/status")["components"]["workers"]["workers"]
    return [int(w["pid"]) for w in workers if w["pid"] is not None]


def warm(daemon: Daemon, path: str, conns: int) -> None:
    """One second of the cell's load, not counted: a fresh daemon's first requests compile
    and measure (the inline policy's warm-up), which is not what it serves at steady state."""
    url, body = _target(daemon, path)
    wrk.run(url, body, {}, conns, 1.0, cpus=LOAD_CPU, idle=lambda: idle(daemon))


def two_daemons(root: Path, broker: Broker, conns: int, seconds: float) -> Cell:
    """The adapter on two fresh daemon processes, one started on each CPU, half the
    connections each (two wrk, both on CPU 0): what worker processes with a GIL each could
    reach."""
    with (
        fresh_daemon(root, broker, LOAD_CPU, "two-a") as (first, pid_a),
        fresh_daemon(root, broker, ONE_CPU, "two-b") as (second, pid_b),
    ):
        pids = [pid_a, pid_b]
        for d in (first, second):
            warm(d, "adapter", conns // 2)
        cpu0, sw0 = sum(map(cpu_seconds, pids)), sum(map(switches, pids))
        results: list[wrk.WrkResult] = []

        def load(d: Daemon) -> None:
            url, body = _target(d, "adapter")
            results.append(wrk.run(url, body, {}, conns // 2, seconds, cpus=LOAD_CPU))

        threads = [threading.Thread(target=load, args=(d,)) for d in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(results) != len(threads):
            raise RuntimeError("a wrk run of the two-daemon cell failed")
        n = sum(r.requests for r in results)
        cpu, sw = sum(map(cpu_seconds, pids)) - cpu0, sum(map(switches, pids)) - sw0
    return Cell(sum(r.rps for r in results), median([r.p50 for r in results]),
                max(r.p99 for r in results), cpu / n * 1e6, sw / n)  # fmt: skip


def overtaken(samples: Sequence[tuple[float, float]]) -> list[int]:
    """Per request: how many requests published after it were answered before it."""
    ordered = sorted(samples)
    out = []
    for i, (_, answered) in enumerate(ordered):
        count, j = 0, i + 1
        while j < len(ordered) and ordered[j][0] < answered:
            count += ordered[j][1] < answered
            j += 1
        out.append(count)
    return out


def fan_in(port: int, topic: str, clients: int, seconds: float, body: Path) -> tuple[
    int, float, float, float, float
]:  # fmt: skip
    """`bench.mqtt_fanin` in a child pinned to the load generator's CPU."""
    cmd = ["taskset", "-c", LOAD_CPU, sys.executable, "-m", "bench.mqtt_fanin", str(port),
           topic, str(clients), str(seconds), str(body)]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=seconds + 120,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"mqtt_fanin failed: {done.stderr[-2000:]}")
    doc = json.loads(done.stdout.splitlines()[-1])
    samples = [(a, b) for a, b in doc["samples"]]
    lat = [b - a for a, b in samples]
    late = overtaken(samples)
    return (len(samples), float(doc["seconds"]), median(lat), percentile(lat, 99),
            percentile(late, 99))  # fmt: skip


def mqtt_rounds(
    root: Path, broker: Broker, seconds: float, rounds: int, clients: Sequence[int]
) -> dict[Key, list[Cell]]:
    """Adapter and model at each client count on a fresh daemon on both CPUs, the adapter
    at 16 clients on a fresh daemon on one CPU too (``mqtt 1cpu``) and on one with two
    workers (``mqtt 2 workers``), and the paho echo (no daemon: the transport's ceiling),
    ``rounds`` times."""
    adapter_body, model_body = root / "adapter.json", root / "model.json"
    adapter_body.write_bytes(SAMPLE.read_bytes())
    model_body.write_bytes(v2_json())
    base = f"wasmgate/v1/{GATEWAY}"
    paths = {
        "adapter": (f"{base}/adapters/{ADAPTER}/req", adapter_body),
        "model": (f"{base}/models/{MODEL}/infer", model_body),
    }
    echo = start_echo(broker.port, qos=0)  # as the requesters: QoS 0 both ways
    cells: dict[Key, list[Cell]] = {}
    try:
        for _ in range(rounds):
            for n in clients:
                for path, (topic, body) in paths.items():
                    for where, cpus, workers in _mqtt_settings(path, n):
                        with fresh_daemon(root, broker, cpus, workers=workers) as (daemon, pid):
                            load = functools.partial(fan_in, broker.port, topic, n, seconds, body)
                            load_warm = functools.partial(fan_in, broker.port, topic, n, 1.0, body)
                            load_warm()
                            pids = [pid, *_worker_pids(daemon)] if workers > 1 else pid
                            cells.setdefault((path, where, n), []).append(measured(pids, load))
                load = functools.partial(fan_in, broker.port, "bench/echo", n, seconds,
                                         adapter_body)  # fmt: skip
                cells.setdefault(("echo", "mqtt", n), []).append(measured(os.getpid(), load))
    finally:
        close_threaded(echo)
    return cells


def _mqtt_settings(path: str, clients: int) -> list[tuple[str, str, int]]:
    """(cell, CPUs, workers) of an MQTT path at ``clients``: both CPUs always; at 16 adapter
    clients also CPU 1 only and two workers on both CPUs (issue 49's ratio)."""
    if path == "adapter" and clients == 16:
        return [("mqtt", BOTH_CPUS, 1), (MQTT_ONE, ONE_CPU, 1), (MQTT_WORKERS, BOTH_CPUS, 2)]
    return [("mqtt", BOTH_CPUS, 1)]


def med(cells: Sequence[Cell]) -> Cell:
    """The median of every field over the rounds."""
    return Cell(*(median([getattr(c, f) for c in cells]) for f in Cell.__dataclass_fields__))


def start_demo(
    root: Path,
    port: int,
    gateway: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
    *,
    workers: int = 1,
) -> Daemon:
    """``wasmgate serve --demo`` on a free port, its MQTT bridge on broker ``port`` as
    ``gateway`` (``env``: e.g. a PYTHONPATH with another version of the package; ``prefix``:
    what it runs under, e.g. ``taskset -c 1``)."""
    mqtt = {"host": "127.0.0.1", "port": port, "gateway_id": gateway}
    root.mkdir(parents=True, exist_ok=True)
    config = {"mqtt": mqtt, "log": {"level": "WARNING"}, "workers": {"count": workers}}
    daemon = Daemon(root, config, ("--demo",), env, prefix)
    daemon.start(timeout=180)
    return daemon


@contextmanager
def fresh_daemon(
    root: Path, broker: Broker, cpus: str, name: str = "daemon", workers: int = 1
) -> Iterator[tuple[Daemon, int]]:
    """A new ``serve --demo`` process started on ``cpus`` (its data dir, hence its caches,
    kept between cells: the process is new, the compiled modules are not), stopped after."""
    daemon = start_demo(root / name, broker.port, GATEWAY if name == "daemon" else name,
                        prefix=("taskset", "-c", cpus), workers=workers)  # fmt: skip
    try:
        yield daemon, daemon.proc.pid if daemon.proc is not None else 0
    finally:
        daemon.stop()


def measure(quick: bool) -> dict[Key, Cell]:
    seconds, rounds = (1.0, 1) if quick else (3.0, 3)
    clients = (16,) if quick else CLIENTS
    with tempfile.TemporaryDirectory(prefix="wasmgate-cores-") as tmp:
        root = Path(tmp)
        broker = Broker(root / "mosquitto")
        broker.start()
        try:
            raw = http_rounds(root, broker, seconds, rounds)
            raw |= mqtt_rounds(root, broker, seconds, rounds, clients)
        finally:
            broker.stop()
    return {k: med(v) for k, v in raw.items()}


def run(quick: bool) -> list[Figure]:
    m = measure(quick)
    print(report.tables(m), file=sys.stderr)
    return report.goal_figures(m) + report.detail_figures(m) + memory_figures(quick)


def main() -> None:
    script_main(__doc__, run, "1 s cells, one round, MQTT at 16 clients")


if __name__ == "__main__":
    main()

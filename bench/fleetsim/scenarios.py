"""The issue's scenarios over a `SimFleet`, each as figures (value vs the issue's goal).

1. ``rollout``: probe v2 with ``--waves 1,1%,10%,100% --abort-failed 2%``;
2. ``abort``: probe v3 while 3 % of the gateways fail their pull: the abort trips in the
   first wave past 2 % and every gateway that got v3's document goes back to v2;
3. ``status``: ``fleet status --group g1`` over every retained report;
4. ``restart``: the broker restarts under N connected gateways: time until all reconnected
   and re-reported, peak connects and pulls per second;
5. ``offline``: 10 % of the gateways are offline while probe v3 rolls out (they time out
   and count as failed, under ``--abort-failed 20%``), then come back and converge. The
   rollout must end with exactly those timed out and every other gateway applied.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.common import Figure
from bench.fleetsim.fleet import PREFIX, Run, SimFleet
from bench.fleetsim.observe import Observer, sys_counters
from wasmgate.runtime.fleet.status import Report

Check = Callable[[dict[str, Report]], bool]


@dataclass
class Outcome:
    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, scenario: str, name: str, value: float, unit: str, goal: float) -> None:
        self.figures.append(Figure(f"fleet-sim {scenario}", name, value, unit, "goal", goal))

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)


def on(version: int) -> Check:
    def check(reports: dict[str, Report]) -> bool:
        return all(_version(r) == version for r in reports.values())

    return check


def _version(r: Report) -> int | None:
    b = r.bundles.get("probe")
    return b.version if b is not None and b.state == "applied" else None


def table_rows(out: str) -> dict[str, str]:
    """Each gateway's state in the CLI's final table (``gw-NNNNN  wave  state  version``)."""
    rows = re.finditer(r"^(gw-\d+)\s+\d+\s+(.+?)\s{2,}", out, re.MULTILINE)
    return {m[1]: m[2] for m in rows}


def table_states(out: str) -> dict[str, int]:
    """Counts of each state in the CLI's final table."""
    return dict(Counter(table_rows(out).values()))


def _cli(o: Outcome, scenario: str, run: Run, wall_goal: float) -> None:
    o.add(scenario, "CLI wall time", run.wall_s, "s", wall_goal)
    o.add(scenario, "CLI peak RSS", run.rss_mb, "MiB", 500)
    o.add(scenario, "CLI CPU", run.cpu_s, "s", wall_goal)


def rollout(f: SimFleet, o: Outcome, ref: str, version: int) -> None:
    before, reqs = sys_counters(f.broker.host, f.broker.port), f.registry_requests()
    observer = Observer(f.broker.host, f.broker.port, PREFIX)
    try:
        time.sleep(1.0)
        observer.reset()
        start = time.time()
        run = f.rollout(ref, "--waves", "1,1%,10%,100%", "--abort-failed", "2%",
                        "--wave-timeout", "600")  # fmt: skip
        reached = observer.snapshot()
        counts = observer.report_counts()
        messages, payload = observer.totals()
    finally:
        observer.close()
    after, reqs2 = sys_counters(f.broker.host, f.broker.port), f.registry_requests()
    _cli(o, "rollout", run, 300)
    names = f.names()
    for number, size in enumerate(_wave_sizes(f.n), start=1):
        first = max((reached.get(n, start) for n in names[:size]), default=start)
        o.add("rollout", f"wave {number} ({size} gateways) reached by", first - start, "s", 0)
    o.add("rollout", "reports per gateway (max)", max(counts.values(), default=0), "", 4)
    o.add("rollout", "messages on the fleet's topics while the CLI ran", messages, "", f.n)
    o.add("rollout", "their payload bytes", payload, "B", 0)
    for k in ("bytes_in", "bytes_out"):
        o.add(
            "rollout", f"broker {k.replace('_', ' ')} (all packets)", after[k] - before[k], "B", 0
        )
    o.add("rollout", "broker retained messages", after["retained"], "msg", f.n)
    o.add("rollout", "broker RSS", f.broker_rss_mb(), "MiB", 0)
    db = f.root / "mosquitto" / "data" / "mosquitto.db"
    o.add("rollout", "broker retained store (mosquitto.db)", db.stat().st_size / 2**20, "MiB", 0)
    o.add("rollout", "registry manifest GETs", reqs2["manifests"] - reqs["manifests"], "", f.n)
    o.add("rollout", "registry blob GETs", reqs2["blobs"] - reqs["blobs"], "", f.n)
    states = table_states(run.out)
    o.expect(run.code == 0 and states.get("applied") == f.n, f"rollout: {run.code} {states}")
    reports = f.wait_reports(on(version), 120)
    o.expect(on(version)(reports) and len(reports) == f.n, "rollout: not every gateway on v2")


def _wave_sizes(n: int) -> list[int]:
    """Cumulative sizes of ``1,1%,10%,100%`` (percents round up), repeats dropped."""
    sizes = [1, -(-n // 100), -(-n // 10), n]
    return sorted(set(sizes))


def abort(f: SimFleet, o: Outcome, ref: str, previous: int) -> None:
    names = f.names()
    failing = [n for i, n in enumerate(names) if i % 33 == 16]  # 3 %, spread over the waves
    f.all("fail", failing)
    run = f.rollout(ref, "--waves", "1,1%,10%,100%", "--abort-failed", "2%",
                    "--wave-timeout", "600")  # fmt: skip
    f.all("fail", [])
    _cli(o, "abort", run, 300)
    states = table_states(run.out)
    wave = re.search(r"aborted in wave (\d+)", run.err)
    o.add("abort", "aborted in wave", float(wave[1]) if wave else 0, "", 2)
    o.add("abort", "gateways rolled back", states.get("rolled back", 0), "", 0)
    o.add("abort", "gateways untouched", states.get("untouched", 0), "", 0)
    o.expect(run.code == 1 and wave is not None, f"abort: exit {run.code}, {states}")
    reports = f.wait_reports(on(previous), 120)
    o.expect(on(previous)(reports), "abort: not every gateway back on the previous version")


def status(f: SimFleet, o: Outcome) -> None:
    runs = [f.status() for _ in range(3)]
    run = sorted(runs, key=lambda r: r.wall_s)[1]  # the median of three
    _cli(o, "status", run, 5)
    rows = len(re.findall(r"^gw-\d+ ", run.out, re.MULTILINE))
    o.add("status", "gateways listed", rows, "", f.n)
    o.expect(run.code == 0 and rows == f.n, f"status: exit {run.code}, {rows} rows")


def restart(f: SimFleet, o: Outcome) -> None:
    observer = Observer(f.broker.host, f.broker.port, PREFIX)
    try:
        time.sleep(1.0)
        observer.reset()
        start = time.time()
        f.broker.restart()
        down = time.time() - start  # gateways that try before this find no broker
        f.all("wait")
        connected = time.time() - start
        while len(observer.snapshot()) < f.n and time.time() - start < 300:
            time.sleep(0.2)
        seen = observer.snapshot()
    finally:
        observer.close()
    stats = f.all("stats")
    o.add("restart", "broker stopped and listening again after", down, "s", 0)
    o.add("restart", "all reconnected after", connected, "s", 120)
    last = max(seen.values(), default=start) - start
    o.add("restart", "all re-reported after", last, "s", 120)
    o.add("restart", "gateways re-reported", len(seen), "", f.n)
    o.add(
        "restart",
        "peak connects in one second (gateways)",
        _peak(stats, "connects", start),
        "/s",
        200,
    )
    accepted = f.broker_connects(start)
    o.add("restart", "peak connects in one second (broker log)",
          max(accepted.values(), default=0), "/s", 200)  # fmt: skip
    o.add("restart", "connects the broker logged", sum(accepted.values()), "", f.n)
    o.add("restart", "peak pulls in one second", _peak(stats, "pulls", start), "/s", 200)
    o.expect(len(seen) == f.n, f"restart: {len(seen)} of {f.n} re-reported")


def _peak(stats: list[dict[str, dict[str, int]]], key: str, since: float) -> float:
    total: dict[int, int] = {}
    for s in stats:
        for second, count in s[key].items():
            if int(second) >= int(since):
                total[int(second)] = total.get(int(second), 0) + count
    return float(max(total.values(), default=0))


def offline(f: SimFleet, o: Outcome, ref: str, version: int, timeout: float) -> None:
    names = f.names()
    away = names[5::10]  # 10 %, none of the first wave's
    f.all("stop", away)
    run = f.rollout(ref, "--waves", "1,1%,10%,100%", "--abort-failed", "20%",
                    "--wave-timeout", str(timeout))  # fmt: skip
    states = table_states(run.out)
    _cli(o, "offline", run, 0)  # no goal: each wave with an offline gateway waits `timeout`
    o.add("offline", "wave timeout", timeout, "s", 0)
    o.add("offline", "timed out (offline)", states.get("timeout", 0), "", len(away))
    wrong = offline_end(run, names, set(away))
    o.expect(wrong is None, f"offline: {wrong}")
    start = time.monotonic()
    f.all("start", away)
    reports = f.wait_reports(on(version), 300)
    o.add("offline", "back online: all converged after", time.monotonic() - start, "s", 120)
    back = on(version)(reports) and len(reports) == f.n
    o.expect(back, f"offline: {len(reports)} reports, not all on v{version} once back")


def offline_end(run: Run, names: Sequence[str], away: set[str]) -> str | None:
    """What is wrong with the offline rollout's end, or None: it finished without an abort
    (exit 1: not every gateway applied), every online gateway applied and exactly the
    offline ones timed out."""
    rows = table_rows(run.out)
    want = {gw: "timeout" if gw in away else "applied" for gw in names}
    wrong = sorted((gw, rows.get(gw, "missing")) for gw in want if rows.get(gw) != want[gw])
    wrong += sorted((gw, "not in the rollout") for gw in rows.keys() - want.keys())
    if run.code == 1 and "aborted in wave" not in run.err and not wrong:
        return None
    return f"exit {run.code}, {table_states(run.out)}, {len(wrong)} rows wrong: {wrong[:3]}"

"""The figures and tables of `bench.bench_cores` (its cells' medians, the issue's goals)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.common import Figure

LOAD_CPU, ONE_CPU, BOTH_CPUS = "0", "1", "0,1"
TWO_DAEMONS = "two daemons"
WORKERS = "0,1 2 workers"
"""HTTP cells of one daemon on both CPUs with ``[workers] count = 2``."""
MQTT_ONE = "mqtt 1cpu"
"""MQTT cells of a daemon started on CPU 1 only (``mqtt``: on both CPUs)."""
MQTT_WORKERS = "mqtt 2 workers"
"""MQTT cells of one daemon on both CPUs with ``[workers] count = 2``."""
CONNECTIONS = (1, 16)
CLIENTS = (1, 16, 64)


@dataclass(frozen=True)
class Cell:
    """One measurement: req/s, latency percentiles (s), daemon cost per request."""

    rps: float
    p50: float
    p99: float
    cpu_us: float
    switches: float
    overtaken_p99: float = 0.0


Key = tuple[str, str, int]
"""(path, CPUs or ``mqtt``, connections or clients)"""


def goal_figures(m: dict[Key, Cell]) -> list[Figure]:
    """The issue's goals as same-run ratios (the goal is in each figure's name)."""

    def f(name: str, value: Cell, base: Cell, base_name: str) -> Figure:
        return Figure("cores", name, value.rps, "/s", base_name, base.rps, lower_is_better=False)

    a2, a1 = m["adapter", BOTH_CPUS, 16], m["adapter", ONE_CPU, 16]
    v2, v1 = m["model", BOTH_CPUS, 16], m["model", ONE_CPU, 16]
    q16, q1 = m["adapter", "mqtt", 16], m["adapter", MQTT_ONE, 16]
    e16 = m["echo", "mqtt", 16]
    return [
        # Issue 49 (worker processes): ratios of a fresh daemon on 2 CPUs to one on CPU 1.
        f("HTTP adapter c16 req/s, 2 CPUs (goal ratio >= 1.6; >= 1.0 with one process)", a2,
          a1, "CPU 1 only"),
        f("HTTP V2 JSON c16 req/s, 2 CPUs (goal >= 1.5; >= 1.0 with one process)", v2, v1,
          "CPU 1 only"),
        f("MQTT adapter 16 clients answered/s, 2 CPUs (goal >= 1.5)", q16, q1, "CPU 1 only"),
        f("MQTT adapter 16 clients answered/s, 2 CPUs, 2 workers (goal ratio >= 1.5)",
          m["adapter", MQTT_WORKERS, 16], q1, "CPU 1 only"),
        Figure("cores", "MQTT adapter 16 clients p99, 2 CPUs, 2 workers (goal ratio <= 1.0)",
               m["adapter", MQTT_WORKERS, 16].p99 * 1e3, "ms", "CPU 1 only", q1.p99 * 1e3),
        Figure("cores", "HTTP adapter c16 p99, 2 CPUs (goal ratio <= 1.0)", a2.p99 * 1e3, "ms",
               "CPU 1 only", a1.p99 * 1e3),
        f("HTTP adapter c16 req/s, 2 daemon processes, 1 CPU each (worker-process ceiling)",
          m["adapter", TWO_DAEMONS, 16], a1, "one daemon, CPU 1 only"),
        f("HTTP adapter c16 req/s, 2 CPUs, 2 workers (goal ratio >= 1.6)",
          m["adapter", WORKERS, 16], a1, "CPU 1 only"),
        f("HTTP V2 JSON c16 req/s, 2 CPUs, 2 workers (goal ratio >= 1.5)",
          m["model", WORKERS, 16], v1, "CPU 1 only"),
        Figure("cores", "HTTP adapter c16 p99, 2 CPUs, 2 workers (goal ratio <= 1.0)",
               m["adapter", WORKERS, 16].p99 * 1e3, "ms", "CPU 1 only", a1.p99 * 1e3),
        # Issue 42's, kept: the adapter against the model path and against itself.
        f("HTTP adapter c16 req/s (goal >= 0.5)", a2, v2, "V2 JSON model c16"),
        f("HTTP adapter c16 req/s (goal >= 1.0)", a2, m["adapter", BOTH_CPUS, 1], "adapter c1"),
        f("MQTT adapter 16 clients answered/s (goal >= 0.8)", q16, a2, "HTTP adapter c16"),
        f("MQTT adapter 16 clients answered/s (goal >= 0.5)", q16, e16, "paho echo 16"),
        f("MQTT model 16 clients answered/s (goal >= 0.9)", m["model", "mqtt", 16], e16,
          "paho echo 16"),
    ]  # fmt: skip


def _peer(key: Key) -> tuple[Key, str]:
    """The same-run cell a detail cell is read against: an HTTP cell on the other CPU set
    (one CPU against both, both or two daemons against one), an MQTT cell against the paho
    echo (the echo against the adapter)."""
    path, where, n = key
    if where == MQTT_ONE:
        return (path, "mqtt", n), f"{path} mqtt (both CPUs) x{n}"
    if where == MQTT_WORKERS:
        return (path, MQTT_ONE, n), f"{path} mqtt CPU 1 only x{n}"
    if where == "mqtt":
        other = "adapter" if path == "echo" else "echo"
        return (other, "mqtt", n), f"{other} mqtt x{n}"
    if where == WORKERS:
        return (path, ONE_CPU, n), f"{path} cpu {ONE_CPU} x{n}"
    cpus = BOTH_CPUS if where == ONE_CPU else ONE_CPU
    return (path, cpus, n), f"{path} cpu {cpus} x{n}"


def detail_figures(m: dict[Key, Cell]) -> list[Figure]:
    """Per cell: req/s, p50, p99, and the daemon's CPU µs and context switches per request,
    each beside the same figure of its peer cell (`_peer`); a cell without one is left to
    the tables."""
    out = []
    for key, c in sorted(m.items()):
        path, where, n = key
        peer_key, peer = _peer(key)
        p = m.get(peer_key)
        if p is None:
            continue
        named = where in ("mqtt", MQTT_ONE, MQTT_WORKERS, TWO_DAEMONS, WORKERS)
        label = f"{path} {where if named else 'cpu ' + where} x{n}"
        out += [
            Figure(label, "req/s", c.rps, "/s", peer, p.rps, lower_is_better=False),
            Figure(label, "p50", c.p50 * 1e3, "ms", peer, p.p50 * 1e3),
            Figure(label, "p99", c.p99 * 1e3, "ms", peer, p.p99 * 1e3),
            Figure(label, "daemon CPU per request", c.cpu_us, "us", peer, p.cpu_us),
            Figure(label, "daemon switches per request", c.switches, "", peer, p.switches),
        ]
        if where in ("mqtt", MQTT_ONE, MQTT_WORKERS):
            out.append(Figure(label, "overtaken by, p99", c.overtaken_p99, "", peer,
                              p.overtaken_p99))  # fmt: skip
    return out


def tables(m: dict[Key, Cell]) -> str:
    """Both tables in the issue's shape (markdown), medians over the rounds."""
    names = {"adapter": "HTTP raw adapter, sandboxed", "model": "HTTP V2 JSON, the model"}
    head = ("| daemon on | path | 1 connection: req/s, p50 | 16 connections: req/s, p50 "
            "| CPU µs / switches per req at 16 |")  # fmt: skip
    lines = [head, "| --- | --- | --- | --- | --- |"]
    for cpus, label in ((ONE_CPU, "CPU 1 only"), (BOTH_CPUS, "both CPUs")):
        for path in ("adapter", "model"):
            c1, c16 = m[path, cpus, 1], m[path, cpus, 16]
            lines.append(f"| {label} | {names[path]} | {c1.rps:,.0f}, {c1.p50 * 1e6:,.0f} µs "
                         f"| {c16.rps:,.0f}, {c16.p50 * 1e3:.1f} ms "
                         f"| {c16.cpu_us:.0f} / {c16.switches:.1f} |")  # fmt: skip
    for path in ("adapter", "model"):
        c16 = m[path, WORKERS, 16]
        lines.append(f"| both CPUs, 2 workers | {names[path]} | - "
                     f"| {c16.rps:,.0f}, {c16.p50 * 1e3:.1f} ms "
                     f"| {c16.cpu_us:.0f} / {c16.switches:.1f} |")  # fmt: skip
    two = m["adapter", TWO_DAEMONS, 16]
    lines.append(f"| two daemons, one per CPU | HTTP raw adapter, sandboxed | - "
                 f"| {two.rps:,.0f}, {two.p50 * 1e3:.1f} ms "
                 f"| {two.cpu_us:.0f} / {two.switches:.1f} |")  # fmt: skip
    head = (
        "| MQTT path | clients | answered/s | p50 | p99 | overtaken by (p99) "
        "| CPU µs / switches per req |"
    )
    lines += ["", head, "| --- | --- | --- | --- | --- | --- | --- |"]
    for path, where in (("adapter", MQTT_ONE), ("adapter", "mqtt"), ("model", "mqtt"),
                        ("echo", "mqtt")):  # fmt: skip
        for n in CLIENTS:
            if (path, where, n) not in m:
                continue
            c = m[path, where, n]
            on = " (CPU 1 only)" if where == MQTT_ONE else ""
            lines.append(f"| {path}{on} | {n} | {c.rps:,.0f} | {c.p50 * 1e3:.2f} ms "
                         f"| {c.p99 * 1e3:.1f} ms | {c.overtaken_p99:.0f} "
                         f"| {c.cpu_us:.0f} / {c.switches:.1f} |")  # fmt: skip
    return "\n".join(lines)

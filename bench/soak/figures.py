"""The soak's figures (the bench table's rows, each beside its goal or baseline) and the
goals met or not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.common import Figure, percentile
from bench.soak.ledger import OK, Ledger
from bench.soak.mqtt_link import MqttLink
from bench.soak.plan import Plan
from bench.soak.probe import Sample, slope_per_10min
from bench.soak.traffic import MIX, Traffic

S = "soak"
MQTT_KINDS = ("mqtt5", "mqtt311", "mqtt5-deadline-1ms")
FAULT_OK = {"hot swap (PUT /v1/bundles)": "201", "staged release 20%": "201",
            "staged release abort": "200"}  # fmt: skip
"""What a fault's outcome starts with when it worked (others: no exception)."""
MEMFD_SLACK = 2
RESOURCES = (("rss_mib", "daemon RSS", "MiB"), ("fds", "open fds", "n"),
             ("threads", "threads", "n"), ("store_mib", "SQLite store size", "MiB"))  # fmt: skip
SLOPE_GOALS = {"rss_mib": 1.0, "fds": 1.0, "threads": 1.0, "store_mib": 1.0}
"""Per 10 minutes after warm-up: RSS <= 1 MiB; fds and threads flat (under one per 10
minutes); the store bounded (it drains)."""


@dataclass
class Result:
    plan: Plan
    capacity: float
    rate: float
    ledger: Ledger
    samples: list[Sample]
    faults: list[tuple[float, str, str]]
    mqtt: MqttLink
    traffic: Traffic
    status: dict[str, Any]
    fds_at: dict[str, dict[str, int]]
    threads_at: dict[str, dict[str, int]]
    processes: int = 1
    """The gateway's processes (a supervisor and its workers, or one)."""

    def measured(self) -> list[Sample]:
        """Samples after warm-up while traffic ran (the slopes' window)."""
        return [s for s in self.samples if s.phase in ("before", "during")]

    def settled(self) -> list[Sample]:
        return [s for s in self.samples if s.phase == "settle"]

    def at_rest(self) -> tuple[Sample | None, Sample | None]:
        """The samples with nothing in flight and our connections closed: after warm-up,
        at the end."""
        rest = {s.phase: s for s in self.samples if s.phase.startswith("rest")}
        return rest.get("rest after warm-up"), rest.get("rest at the end")

    def events_lost(self) -> int:
        return len(self.traffic.events_expected - self.mqtt.events.keys())

    def oversize_refused(self) -> int:
        mqtt = self.status.get("components", {}).get("mqtt", {})
        return int(mqtt.get("oversize_refused", -1))

    def fds_grown(self) -> str:
        """Kinds of fds (`bench.soak.probe.fd_kinds`) that changed between the rest points."""
        return _diff(self.fds_at.get("rest after warm-up", {}),
                     self.fds_at.get("rest at the end", {}))  # fmt: skip

    def threads_changed(self) -> str:
        """The daemon's threads, by name, that came or went between the rest points."""
        return _diff(self.threads_at.get("rest after warm-up", {}),
                     self.threads_at.get("rest at the end", {}))  # fmt: skip

    def fds_flat(self) -> bool:
        """No kind of fd grew between the rest points, except sockets (keep-alive
        connections to the cloud come and go on their own timer) and up to
        `MEMFD_SLACK` wasmtime memory images per process (a replaced version's module is
        freed by the collector's next full pass, not at once)."""
        a, b = self.fds_at.get("rest after warm-up", {}), self.fds_at.get("rest at the end", {})
        slack = {"socket": 1 << 30, "memfd": MEMFD_SLACK * self.processes}
        return all(b[k] - a.get(k, 0) <= slack.get(k, 0) for k in b)

    def fault_failures(self) -> list[str]:
        bad = []
        for _, name, outcome in self.faults:
            want = FAULT_OK.get(name)
            if outcome.startswith("FAILED") or (want and not outcome.startswith(want)):
                bad.append(f"{name}: {outcome}")
        return bad


def _diff(a: dict[str, int], b: dict[str, int]) -> str:
    """What changed from ``a`` to ``b`` (counts by name), e.g. ``asyncio_3 +1``."""
    diff = {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b))}
    return ", ".join(f"{k} {d:+d}" for k, d in diff.items() if d) or "none"


def _transport_rows(r: Result) -> list[Figure]:
    rows = []
    for name, t in r.ledger.tallies.items():
        rows.append(Figure(S, f"{name}: answers lost (goal 0)", t.lost, "n", "sent", t.sent))
        if name in MQTT_KINDS:
            rows.append(Figure(S, f"{name}: duplicates beyond QoS 1 (goal 0)", t.duplicates,
                               "n", "answers", t.answered))  # fmt: skip
        before, during = t.latencies.get("before", []), t.latencies.get("during", [])
        if name in MIX and before and during:
            rows.append(Figure(S, f"{name}: p99 during faults (goal <= 3x)",
                               percentile(during, 99) * 1e3, "ms", "p99 before",
                               percentile(before, 99) * 1e3))  # fmt: skip
        for kind, n in sorted(t.answers.items()):
            if kind != OK:
                rows.append(Figure(S, f"{name}: answered {kind}", n, "n", "sent", t.sent))
    return rows


def _resource_rows(r: Result) -> list[Figure]:
    measured, settled = r.measured(), r.settled()
    if not measured or not settled:
        return []
    rows = []
    for attr, label, unit in RESOURCES:
        rows.append(Figure(S, f"{label}: slope after warm-up", slope_per_10min(measured, attr),
                           f"{unit}/10min", "goal", SLOPE_GOALS[attr]))  # fmt: skip
    start, end = r.at_rest()
    for attr, label, unit in RESOURCES:
        if start is not None and end is not None:
            rows.append(Figure(S, f"{label}: at rest, end", float(getattr(end, attr)), unit,
                               "at rest, after warm-up", float(getattr(start, attr))))  # fmt: skip
    return rows


def figures(r: Result) -> list[Figure]:
    events = sum(r.mqtt.events.values())
    sent_big = r.ledger.tally("mqtt5-oversize").sent
    rows = [Figure(S, "capacity, closed loop, 8 clients", r.capacity, "req/s", "soak rate",
                   r.rate, lower_is_better=False)]  # fmt: skip
    rows += _transport_rows(r)
    rows += [
        Figure(S, "mqtt5-oversize: refused by the daemon", r.oversize_refused(), "n", "sent",
               sent_big),
        Figure(S, "mqtt5-oversize: answered (goal 0)", r.mqtt.big_answers, "n", "sent",
               sent_big),
        Figure(S, "events: emitted, never received (goal 0)", r.events_lost(), "n", "emitted",
               len(r.traffic.events_expected)),
        Figure(S, "events: duplicates beyond QoS 1 (goal 0)", r.mqtt.event_duplicates, "n",
               "received", events),
        Figure(S, "events: re-sent after a reconnect (QoS 1)", r.mqtt.event_redelivered, "n",
               "received", events),
        Figure(S, "faults that failed (goal 0)", len(r.fault_failures()), "n", "faults done",
               len(r.faults)),
    ]  # fmt: skip
    return rows + _resource_rows(r)


def verdict(r: Result) -> list[tuple[str, bool, str]]:
    """(goal, met, detail); names starting ``(soft)`` do not fail the run."""
    lost, dups = r.ledger.total("lost"), r.ledger.total("duplicates")
    refused, sent_big = r.oversize_refused(), r.ledger.tally("mqtt5-oversize").sent
    short = "(soft) " if r.plan.minutes < 10 else ""  # slopes need time to mean anything
    goals = [
        ("no answer lost", lost == 0,
         f"{lost} lost of {r.ledger.total('sent')} sent {r.ledger.lost_reasons()}".strip()),
        ("no duplicate beyond QoS 1", dups == 0, f"{dups}"),
        ("no event lost", r.events_lost() == 0, f"{r.events_lost()}"),
        ("no event duplicate beyond QoS 1", r.mqtt.event_duplicates == 0,
         f"{r.mqtt.event_duplicates}"),
        # >=: a refused request is acknowledged, but one in flight when the broker restarts
        # is delivered again (QoS 1) and refused again
        ("oversize MQTT requests refused, none answered",
         refused >= sent_big and r.mqtt.big_answers == 0,
         f"{refused} refused of {sent_big}, {r.mqtt.big_answers} answered"),
        ("every fault done", not r.fault_failures(), "; ".join(r.fault_failures()) or "all"),
    ]  # fmt: skip
    start, end = r.at_rest()
    if start is not None and end is not None:
        fds = f"{start.fds} after warm-up, {end.fds} at the end: {r.fds_grown()}"
        goals.append(("open fds at rest not grown (sockets aside)", r.fds_flat(), fds))
        # Exact: every thread the daemon has runs from its start (a pool that grew under a
        # peak, or a thread left behind, is one more; one that died is one fewer).
        threads = (f"{start.threads} after warm-up, {end.threads} at the end: "
                   f"{r.threads_changed()}")  # fmt: skip
        goals.append(("threads at rest: as many as after warm-up",
                      end.threads == start.threads, threads))  # fmt: skip
    measured = r.measured()
    for attr, label, unit in RESOURCES:
        slope = slope_per_10min(measured, attr)
        goals.append((f"{short}{label} slope <= {SLOPE_GOALS[attr]:g} {unit}/10 min",
                      slope <= SLOPE_GOALS[attr], f"{slope:.3g}"))  # fmt: skip
    for name in MIX:
        t = r.ledger.tally(name)
        before, during = t.latencies.get("before", []), t.latencies.get("during", [])
        if before and during:
            ratio = percentile(during, 99) / percentile(before, 99)
            goals.append((f"(soft) {name} p99 during <= 3x before", ratio <= 3,
                          f"{ratio:.2f}x"))  # fmt: skip
    return goals

"""How long each phase of a soak lasts and when its faults happen, from ``--minutes``.

Phases: ``capacity`` (closed loop, measures what the rig serves), ``warm-up`` (open loop at
the soak's rate, not measured), ``before`` (the same without faults: the latency
baseline), ``during`` (faults on a schedule), ``settle`` (no new requests: every answer and
event comes in, the daemon's resources are read once more).

Faults repeat in cycles of `Plan.cycle_s` (5 minutes, or the whole ``during`` phase of a
short run, so a 2-minute soak still does each once); SIGHUP every `Plan.sighup_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

CYCLE = (
    (0.10, "broker restart"),
    (0.25, "hot swap (PUT /v1/bundles)"),
    (0.40, "staged release 20%"),
    (0.55, "staged release abort"),
    (0.60, "cloud away"),
    (0.80, "cloud back"),
    (0.90, "hot swap (bundle dir)"),
)
"""Each fault's place in a cycle (a fraction of `Plan.cycle_s`)."""


def _clamp(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


@dataclass(frozen=True)
class Plan:
    minutes: float
    capacity_s: float
    warmup_s: float
    before_s: float
    during_s: float
    sample_s: float

    @classmethod
    def of(cls, minutes: float) -> Plan:
        total = minutes * 60
        capacity_s = 8.0 if total >= 600 else 4.0
        warmup_s = _clamp(total * 0.05, 10, 180)
        before_s = _clamp(total * 0.10, 15, 300)
        during_s = max(30.0, total - capacity_s - warmup_s - before_s)
        sample_s = 5.0 if total >= 600 else 1.0
        return cls(minutes, capacity_s, warmup_s, before_s, during_s, sample_s)

    @property
    def cycle_s(self) -> float:
        return min(300.0, self.during_s)

    @property
    def sighup_s(self) -> float:
        return min(60.0, self.cycle_s / 3)

    def schedule(self) -> list[tuple[float, str]]:
        """(seconds into ``during``, fault) in time order; a cycle that would not finish
        before the phase ends is left out, so the cloud always comes back."""
        events = [(self.sighup_s * (i + 0.5), "SIGHUP")
                  for i in range(int(self.during_s / self.sighup_s))]  # fmt: skip
        cycles = int(self.during_s // self.cycle_s)
        for c in range(cycles):
            events += [(self.cycle_s * (c + at), name) for at, name in CYCLE]
        return sorted(events)

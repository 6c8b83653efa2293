"""What the soak counts: per transport, requests sent, answers (by kind), answers lost,
duplicates, and latencies by phase.

An answer is either ``ok`` or a defined error (an HTTP status, a gRPC code, an MQTT
``status`` property): both count as answered. *Lost* is a request with no answer at all
(a connection dropped mid-request, no answer within `LOST_AFTER_S`). A duplicate is a second
answer to one request: MQTT QoS 1 permits one only when a reconnect happened between the
two copies (a publish is re-sent only on a new connection), so copies on one connection
are duplicates *beyond QoS 1*.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

LOST_AFTER_S = 120.0
"""A request unanswered this long is lost (covers a broker restart and the redelivery)."""

OK = "ok"


@dataclass
class Tally:
    """One transport's (or request kind's) counts."""

    sent: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    lost_why: Counter[str] = field(default_factory=Counter)
    late: int = 0
    """Answers that came after the request was counted lost (then it was not lost)."""
    duplicates: int = 0
    redelivered: int = 0
    latencies: dict[str, list[float]] = field(default_factory=dict)

    @property
    def answered(self) -> int:
        return sum(self.answers.values())


class Ledger:
    """Counts of the whole run; ``phase`` labels the latencies recorded now."""

    def __init__(self) -> None:
        self.phase = "capacity"
        self.tallies: dict[str, Tally] = {}

    def tally(self, transport: str) -> Tally:
        if transport not in self.tallies:
            self.tallies[transport] = Tally()
        return self.tallies[transport]

    def sent(self, transport: str) -> None:
        self.tally(transport).sent += 1

    def answered(self, transport: str, kind: str, seconds: float) -> None:
        t = self.tally(transport)
        t.answers[kind] += 1
        if kind == OK:
            t.latencies.setdefault(self.phase, []).append(seconds)

    def lost(self, transport: str, why: str) -> None:
        t = self.tally(transport)
        t.lost += 1
        t.lost_why[why] += 1

    def lost_reasons(self) -> str:
        """'transport: why xN' for every lost answer (empty when none was lost)."""
        return "; ".join(f"{name}: {why} x{n}" for name, t in self.tallies.items()
                         for why, n in t.lost_why.most_common())  # fmt: skip

    def total(self, what: str) -> int:
        return sum(int(getattr(t, what)) for t in self.tallies.values())

"""The rollout rules of ``wasmgate fleet rollout`` as pure functions: no I/O, no clock.

- Wave sizes (``--waves 1,10%,50%,100%``) are *cumulative*: a percent is of the group's
  gateway count, rounded up (10 % of 3 gateways is 1, never 0); a wave that adds nobody is
  dropped, and a last wave short of 100 % is extended to every gateway, because the group
  document published on success reaches every gateway anyway.
- Gateways join waves in name order, so an operator picks the canaries by naming them.
- Abort when, after at least ``min_done`` gateways finished, the failed share of the
  finished ones exceeds ``--abort-failed`` (a count ``N`` or a percent ``N%``). A gateway that
  did not finish within the wave timeout counts as finished *and* failed.
- Serial of each new document: ``max(now_ms, highest serial any gateway reported + 1)``,
  so it beats whatever a gateway applied, whichever clock signed that.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


class RolloutUsageError(ValueError):
    """A wave list or threshold the rollout cannot use; the message says which part."""


@dataclass(frozen=True)
class Size:
    """A count of gateways or a percent of the group (``percent``)."""

    value: float
    percent: bool

    def of(self, total: int) -> int:
        """How many of ``total`` gateways this is (percents rounded up)."""
        if self.percent:
            return min(total, math.ceil(self.value * total / 100 - 1e-9))
        return min(total, int(self.value))

    def __str__(self) -> str:
        number = f"{self.value:g}"
        return f"{number}%" if self.percent else number


def parse_size(text: str, *, what: str = "size") -> Size:
    """``"3"`` or ``"10%"`` (a percent at most 100); :class:`RolloutUsageError` otherwise."""
    match = _SIZE.match(text)
    if match is None:
        raise RolloutUsageError(f"{what} {text!r}: expected a count like 5 or a percent like 10%")
    value, percent = float(match.group(1)), bool(match.group(2))
    if percent and value > 100:
        raise RolloutUsageError(f"{what} {text!r}: a percent is at most 100%")
    if not percent and value != int(value):
        raise RolloutUsageError(f"{what} {text!r}: a count is a whole number")
    return Size(value, percent)


def parse_waves(text: str) -> list[Size]:
    """``"1,10%,100%"`` as sizes; each must be positive and the list non-decreasing."""
    sizes = [parse_size(part, what="wave") for part in text.split(",")]
    for size in sizes:
        if size.value <= 0:
            raise RolloutUsageError(f"wave {size}: must be more than 0")
    return sizes


def plan_waves(gateways: Iterable[str], sizes: Sequence[Size]) -> list[list[str]]:
    """The gateways newly in each wave (name order); every gateway is in exactly one wave."""
    ordered = sorted(set(gateways))
    waves: list[list[str]] = []
    reached = 0
    for size in [*sizes, Size(100, percent=True)]:
        target = size.of(len(ordered))
        if target > reached:
            waves.append(ordered[reached:target])
            reached = target
    return waves


class Outcome(enum.Enum):
    """How one gateway finished its wave."""

    APPLIED = "applied"
    FAILED = "failed"
    TIMEOUT = "timeout"


def should_abort(outcomes: Mapping[str, Outcome], threshold: Size, min_done: int) -> bool:
    """True when enough gateways finished and too many of them did not apply."""
    done = len(outcomes)
    if done == 0 or done < min_done:
        return False
    failed = sum(1 for o in outcomes.values() if o is not Outcome.APPLIED)
    if threshold.percent:
        return failed * 100 > threshold.value * done
    return failed > threshold.value


def next_serial(now_ms: int, reported: Iterable[int | None]) -> int:
    """A serial above every serial a gateway reported and not below the clock."""
    highest = max((s for s in reported if s is not None), default=0)
    return max(now_ms, highest + 1)


@dataclass(frozen=True)
class Wanted:
    """One bundle of a desired state: what a fleet document lists (name, version, ref)."""

    name: str
    version: int
    ref: str


def with_bundle(previous: Sequence[Wanted], new: Wanted) -> list[Wanted]:
    """The previous bundle set with ``new`` in place of any bundle of the same name."""
    return sorted([w for w in previous if w.name != new.name] + [new], key=lambda w: w.name)


def downgrades_for(previous: Sequence[Wanted], new: Wanted) -> list[tuple[str, int]]:
    """The downgrade permissions a rollback to ``previous`` needs: (name, version) pairs.

    Only a bundle that goes back to a *lower* version needs one; a bundle the previous state
    did not have at all is removed by the gateway, which needs no permission.
    """
    return [(w.name, w.version) for w in previous if w.name == new.name and w.version < new.version]


def below_previous(previous: Mapping[str, Sequence[Wanted]], new: Wanted) -> dict[str, int]:
    """Gateways whose current document asks for a *higher* version of ``new``'s bundle, with
    that version: rolling ``new`` out to them is a rollback (``--allow-downgrade``)."""
    return {
        gw: w.version
        for gw, wanted in sorted(previous.items())
        for w in wanted
        if w.name == new.name and w.version > new.version
    }

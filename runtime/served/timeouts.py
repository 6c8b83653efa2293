"""The one parser of client-given time budgets and deadlines (HTTP and MQTT alike).

A NaN or infinite deadline is not merely useless: NaN compares false with everything, so
it breaks the ordering of asyncio's timer heap and delays *other* requests' deadlines and
the watchdog ping. Every timeout or deadline a client sends is read here and must be a
finite number in range, or the request is refused with `BadRequest` naming the field.
"""

from __future__ import annotations

import math
import time

from wasmgate.runtime.errors import BadRequest

MAX_BUDGET_S = 24 * 3600.0
"""Longest budget a client may ask for; the service caps it further (limits.deadline_ms)."""


def _finite(value: object, field: str, unit: str) -> float:
    """``value`` (a JSON number or its decimal text) as a finite float, else BadRequest."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer like 10**400
            number = math.inf
    elif isinstance(value, str | bytes):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        shown = repr(value)[:40]
        raise BadRequest(f"{field} must be a finite number of {unit}, got {shown}")
    return number


def budget_s(value: object, field: str, unit: str = "milliseconds", scale: float = 1e-3) -> float:
    """A relative budget in seconds: ``value`` units (``scale`` seconds each), in (0, a day]."""
    seconds = _finite(value, field, unit) * scale
    if not 0 < seconds <= MAX_BUDGET_S:
        raise BadRequest(
            f"{field} must be positive and at most {MAX_BUDGET_S * (1 / scale):.0f} {unit}, "
            f"got {value!r}"
        )
    return seconds


def monotonic_of_unix(value: object, field: str, received: float, wall: float) -> float:
    """An absolute Unix-time deadline (seconds) as a ``time.monotonic()`` value.

    ``received`` / ``wall`` are the monotonic and Unix clocks read at the same moment. A
    deadline in the past is allowed (the request expires); one beyond a day is refused.
    """
    absolute = _finite(value, field, "seconds since the Unix epoch")
    if absolute - wall > MAX_BUDGET_S or absolute < 0:
        raise BadRequest(f"{field} must be a Unix time within a day from now, got {value!r}")
    return received + (absolute - wall)


def check_deadline(deadline: float | None, what: str) -> None:
    """A request's monotonic deadline is None or finite (the lowest layer's own guard)."""
    if deadline is not None and not math.isfinite(deadline):
        raise BadRequest(f"{what}: the deadline must be a finite time, got {deadline!r}")


def earliest(*deadlines: float | None) -> float | None:
    """The soonest of the given deadlines (None = no deadline)."""
    given = [d for d in deadlines if d is not None]
    return min(given) if given else None


def after(budget: float | None) -> float | None:
    """The monotonic deadline ``budget`` seconds from now (None stays None)."""
    return None if budget is None else time.monotonic() + budget

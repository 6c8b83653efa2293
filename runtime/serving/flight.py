"""The requests inside the service, counted: what draining waits for, and what a staged
release's gates read (each version's outcomes)."""

from __future__ import annotations

import asyncio
import time

from wasmgate.runtime.errors import BadRequest, Busy, PayloadTooLarge
from wasmgate.runtime.served.loaded import LoadedBundle

__all__ = ["Counted", "InFlight"]

_NOT_THE_VERSIONS_FAULT = (BadRequest, PayloadTooLarge, Busy)


class InFlight:
    """The requests inside the service (queued, running or in fallback); ``idle`` is set
    while there are none (draining waits for it)."""

    def __init__(self) -> None:
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def counted(self, bundle: LoadedBundle) -> Counted:
        return Counted(self, bundle)


class Counted:
    """One request, counted in flight and, as it ends, for the version that answered it (a
    staged release's gates). Refusals of the request itself (bad input, too large, busy)
    are not the version's; a cancelled one is neither. A class, not a generator-based
    context manager: it is on every request's path."""

    __slots__ = ("_bundle", "_flight", "_started")

    def __init__(self, flight: InFlight, bundle: LoadedBundle) -> None:
        self._flight = flight
        self._bundle = bundle
        self._started = 0.0

    def __enter__(self) -> None:
        self._flight.active += 1
        self._flight.idle.clear()
        self._started = time.monotonic()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None or (
            issubclass(kind, Exception) and not issubclass(kind, _NOT_THE_VERSIONS_FAULT)
        ):
            self._bundle.outcomes.record(time.monotonic() - self._started, kind is not None)
        flight = self._flight
        flight.active -= 1
        if flight.active == 0:
            flight.idle.set()

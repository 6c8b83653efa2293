"""The registry's journal: what happened to the bundles, and who is told when it changes.

It owns the recent `Event`s (install attempts, removals, promotions, aborts; the status page
and the management API show them), the last failure per bundle name (or per source, when
the name is unknown), and the hooks run after every change of what serves (MQTT metadata,
metrics, the expiry watch). The registry and its parts (start-up loading, staged releases,
trust and expiry checks) all record here, so the log and the status page tell one story.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("wasmgate.registry")


@dataclass
class Event:
    """One install attempt or removal, for the status page and the management API."""

    at: float
    source: str
    ok: bool
    name: str | None = None
    version: int | None = None
    message: str = ""


class Journal:
    """The last 50 events, the last failure per name, and the change hooks."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.on_change: list[Callable[[], None]] = []
        """Called after every switch or removal (MQTT metadata, metrics)."""
        self._errors: dict[str, Event] = {}

    def record(
        self, source: str, *, ok: bool, name: str | None = None, quiet: bool = False, **kw: Any
    ) -> None:
        """Add an event and log it; a failure also becomes the name's last error.

        ``quiet``: log a failure at DEBUG (one summary line elsewhere says it)."""
        event = Event(at=time.time(), source=source, ok=ok, name=name, **kw)
        self.events = [*self.events[-49:], event]
        if not ok:
            self._errors[name or source] = event
            level = logging.DEBUG if quiet else logging.WARNING
            log.log(level, "bundle not installed: %s", event.message, extra={"source": source})
        else:
            log.info("bundle %s", event.message, extra={"bundle": name, "version": event.version})

    def failures(self) -> list[Event]:
        """Last failed install per bundle name (or source, when the name is unknown)."""
        return list(self._errors.values())

    def last_error(self, name: str) -> Event | None:
        return self._errors.get(name)

    def clear_errors(self, *keys: str) -> None:
        """Forget the last errors of these names or sources (a later install worked)."""
        for key in keys:
            self._errors.pop(key, None)

    def changed(self) -> None:
        """Run every change hook; one that fails is logged and does not stop the others."""
        for hook in self.on_change:
            try:
                hook()
            except Exception:
                log.exception("registry change hook failed")

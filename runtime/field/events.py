"""The one path of adapter events: whatever transport a request came over (HTTP, MQTT,
gRPC), what its adapter emitted is appended to the store's ``events`` stream and reaches
``events/<adapter>`` through the MQTT bridge's forwarder (`wasmgate.runtime.mqtt.spool`).

The request waits for the append (one group commit shared with concurrent requests), so an
event survives a SIGKILL as soon as its request is answered. An event the store refuses (larger
than the stream, disk failing) is logged and counted; the request's answer stands.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from wasmgate.runtime.field.store import Store, StoreError

log = logging.getLogger("wasmgate.field")
EVENTS = "events"


class EventSink(Protocol):
    async def emit(self, adapter: str, events: Sequence[bytes]) -> None:
        """Keep ``events`` for ``events/<adapter>`` (``adapter``: the MQTT route name)."""
        ...


class StoredEvents:
    """`EventSink` on the store's ``events`` stream."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.kept = 0
        self.refused = 0

    async def emit(self, adapter: str, events: Sequence[bytes]) -> None:
        meta = {"adapter": adapter}
        done = await asyncio.gather(
            *(self._store.append(EVENTS, e, meta) for e in events), return_exceptions=True
        )
        for outcome in done:
            if isinstance(outcome, StoreError):
                self.refused += 1
                log.warning("event of %s not kept: %s", adapter, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self.kept += 1

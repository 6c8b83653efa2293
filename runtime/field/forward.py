"""Drains one store stream over a link, in order, without starving live traffic.

A `Forwarder` reads its stream oldest first and hands each entry to ``send``, which returns
a future resolved when the far end confirmed it (an MQTT PUBACK); only then is the entry
acked in the store, so a crash at any point re-sends rather than loses (at least once; the
window for a duplicate is the time between a confirmation and its ack commit).

Backpressure: at most ``window`` entries are sent and unconfirmed at once, and every send
takes a token from a `Pace` shared by the forwarders of one link (``store.drain_rate``), so a
backlog of hours drains at a bounded rate while live answers keep the link. Sending only
happens while ``link`` is set; a failed send stops the pass, waits for what is in flight and
restarts from the oldest stored entry (order is kept, nothing is skipped).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from wasmgate.runtime.field.store import Record, Store
from wasmgate.runtime.ops.tasks import wake_or_timeout

log = logging.getLogger("wasmgate.field")

_IDLE_S = 1.0
"""Longest sleep with nothing to send: also how soon expired entries stop being tried."""

Send = Callable[[Record], "asyncio.Future[None]"]


class Pace:
    """A token bucket: ``rate`` sends per second, bursts of up to ``burst``."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self._rate)


@dataclass
class ForwardStats:
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    in_flight: int = 0


class Forwarder:
    """Owns nothing but its loop: run `run` as a task for as long as the link's owner lives."""

    def __init__(
        self,
        store: Store,
        stream: str,
        send: Send,
        link: asyncio.Event,
        *,
        window: int,
        pace: Pace,
        on_delivered: Callable[[Record], None] | None = None,
    ) -> None:
        self._store = store
        self._stream = stream
        self._send = send
        self._link = link
        self._window = window
        self._pace = pace
        self._on_delivered = on_delivered
        self._inflight: dict[int, asyncio.Future[None]] = {}
        self._confirmed: list[Record] = []
        self._failed = False
        self._wake = asyncio.Event()
        store.watch(stream, self._wake)
        self.stats = ForwardStats()

    async def run(self) -> None:
        cursor = 0
        while True:
            await self._link.wait()
            self._wake.clear()
            await self._ack_confirmed()
            if self._failed:
                await self._settle()
                self._failed, cursor = False, 0  # resend from the oldest unacked entry
                continue
            room = self._window - len(self._inflight)
            recs = await self._store.peek(self._stream, after=cursor, limit=room) if room else []
            if not recs:
                await wake_or_timeout(self._wake, _IDLE_S)  # ends on cancel (gh-86296)
                continue
            cursor = await self._send_in_order(recs, cursor)

    async def _send_in_order(self, recs: list[Record], cursor: int) -> int:
        for rec in recs:
            await self._pace.take()
            if not self._link.is_set() or self._failed:
                break
            try:
                fut = self._send(rec)
            except Exception as e:
                log.warning("store %s: send failed: %s", self._stream, e)
                self._failed = True
                break
            self._inflight[rec.id] = fut
            fut.add_done_callback(functools.partial(self._done, rec))
            self.stats.sent += 1
            cursor = rec.id
        self.stats.in_flight = len(self._inflight)
        return cursor

    def _done(self, rec: Record, fut: asyncio.Future[None]) -> None:
        self._inflight.pop(rec.id, None)
        self.stats.in_flight = len(self._inflight)
        if fut.cancelled() or fut.exception() is not None:
            self.stats.failed += 1
            self._failed = True
        else:
            self._confirmed.append(rec)
        self._wake.set()

    async def _ack_confirmed(self) -> None:
        done, self._confirmed = self._confirmed, []
        if not done:
            return
        await self._store.ack(self._stream, [r.id for r in done])
        self.stats.delivered += len(done)
        if self._on_delivered is not None:
            for rec in done:
                self._on_delivered(rec)

    async def _settle(self) -> None:
        if self._inflight:
            await asyncio.wait(list(self._inflight.values()))
        await self._ack_confirmed()

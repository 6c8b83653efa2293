"""Recently seen requests, so a redelivered request is answered once.

A request is identified by its topic, its reply address, its correlation data (MQTT 5) or
``id`` (3.1.1), and a digest of its payload: a device whose counter restarted and reuses
correlation data with a new payload, or the same payload for another model, is not taken
for a redelivery. Requests without a reply
address or without correlation are never deduplicated (nothing tells two apart).

Each entry holds a future resolved when the first copy's answer reached the broker; a
duplicate waits on it and is then only acknowledged. Entries expire after the window.
Keys are fixed-size digests (a requester controls topic and correlation sizes) and at most
``max_entries`` are kept: beyond, the oldest goes (a copy still waiting on it is not acked,
so the broker redelivers it later).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from typing import Protocol


class NotAnswered(Exception):
    """The first copy of a request was not answered (dropped, stopped); do not ack copies."""


def dedupe_key(
    reply_topic: str | None,
    correlation: bytes | None,
    rid: str | int | None,
    payload: bytes,
    *,
    request_topic: str,
) -> bytes | None:
    """The identity of a request, or None when it cannot be told apart from others."""
    if reply_topic is None:
        return None
    if correlation is not None:
        tag = b"c\0" + correlation
    elif rid is not None:
        tag = b"i\0" + str(rid).encode()
    else:
        return None
    key = hashlib.blake2b(digest_size=KEY_BYTES)
    for part in (request_topic.encode(), reply_topic.encode(), tag, payload):
        key.update(len(part).to_bytes(8, "little"))  # length-prefixed: parts cannot blur
        key.update(part)
    return key.digest()


KEY_BYTES = 32


class Recent(Protocol):
    """What the bridge asks of its recently seen requests: `RecentRequests` in one process,
    `wasmgate.runtime.mqtt.dedupe_shared.SharedRecent` across a gateway's workers."""

    def claim(self, key: bytes) -> asyncio.Future[None] | None: ...
    def answered(self, key: bytes) -> None: ...
    def hold(self, key: bytes) -> None: ...
    def delivered(self, key: bytes) -> None: ...
    def forget(self, key: bytes, why: str) -> None: ...


class RecentRequests:
    """Keys seen within ``window_s``, oldest first (insertion order = expiry order)."""

    def __init__(self, window_s: float, max_entries: int = 10_000) -> None:
        self._window_s = window_s
        self._max = max_entries
        self._seen: OrderedDict[bytes, tuple[float, asyncio.Future[None]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def recall(self, key: bytes) -> asyncio.Future[None] | None:
        """The first copy's answer future if ``key`` was seen within the window."""
        now = time.monotonic()
        while self._seen:
            oldest, (expires, _) = next(iter(self._seen.items()))
            if expires > now:
                break
            del self._seen[oldest]
        entry = self._seen.get(key)
        return entry[1] if entry is not None else None

    def claim(self, key: bytes) -> asyncio.Future[None] | None:
        """None when ``key`` is new (remembered now: the caller works the request); else
        the first copy's answer future."""
        seen = self.recall(key)
        if seen is None:
            _ = self.remember(key)
        return seen

    def hold(self, key: bytes) -> None:
        """The answer waits in the store (the spool answers for it until delivered)."""
        self.answered(key)

    def delivered(self, key: bytes) -> None:
        """A stored answer reached the broker: its window starts now."""
        _ = self.remember(key)
        self.answered(key)

    def remember(self, key: bytes) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seen[key] = (time.monotonic() + self._window_s, fut)
        while len(self._seen) > self._max:
            self.forget(next(iter(self._seen)), "dedupe window full")
        return fut

    def answered(self, key: bytes) -> None:
        entry = self._seen.get(key)
        if entry is not None and not entry[1].done():
            entry[1].set_result(None)

    def forget(self, key: bytes, why: str) -> None:
        """The request was not answered: a redelivery must be worked again."""
        entry = self._seen.pop(key, None)
        if entry is not None and not entry[1].done():
            entry[1].set_exception(NotAnswered(why))
            entry[1].exception()  # retrieved here; waiting copies see it too

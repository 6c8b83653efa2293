"""The HTTP sink of hard examples: the ``samples`` stream POSTed to the cloud endpoint.

With ``samples.http_path`` (and ``cloud.url``), each kept sample (one JSON document,
`wasmgate.runtime.field.samples`) is POSTed to ``cloud.url`` + that path, oldest first, one
at a time, through the cloud client (its token, CA, timeout and circuit breaker); the entry
is acked in the store on a 2xx. An unreachable cloud (connection, timeout, 5xx/429, breaker
open) fails the send after a pause of ``cloud.breaker_reset_s`` (no hot retry loop) and the
drain starts again from that sample; a refusal (other 4xx) is logged, counted and acked, so
one sample the cloud will never take cannot block the others. This sink replaces the MQTT
one (a stream has one consumer: an acked sample is gone).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from wasmgate.runtime.errors import CloudUnavailable
from wasmgate.runtime.field.forward import Forwarder, Pace
from wasmgate.runtime.field.samples import SAMPLES
from wasmgate.runtime.field.store import Record, Store

log = logging.getLogger("wasmgate.field")


class Poster(Protocol):
    async def post_json(self, path: str, body: bytes) -> None:
        """POST ``body`` (JSON) to the cloud; CloudUnavailable on failure."""
        ...


class HttpSamples:
    """Owns the forwarder of the ``samples`` stream to the cloud: run `run` as a task."""

    def __init__(
        self, store: Store, cloud: Poster, path: str, *, retry_s: float, rate: float
    ) -> None:
        self._cloud = cloud
        self._path = path
        self._retry_s = retry_s
        self._up = asyncio.Event()
        self._up.set()  # the breaker and the pause decide; the forwarder just sends
        self.shipped = 0
        self.refused = 0
        self._forwarder = Forwarder(
            store, SAMPLES, self._send, self._up, window=1, pace=Pace(rate, 1)
        )

    async def run(self) -> None:
        await self._forwarder.run()

    def _send(self, rec: Record) -> asyncio.Future[None]:
        return asyncio.ensure_future(self._post(rec))

    async def _post(self, rec: Record) -> None:
        try:
            await self._cloud.post_json(self._path, rec.payload)
        except CloudUnavailable as e:
            if not e.refused:
                log.info("cloud unreachable for sample %d: %s", rec.id, e)
                await asyncio.sleep(self._retry_s)
                raise
            self.refused += 1
            log.warning("cloud refused sample %d (dropped): %s", rec.id, e)
            return
        self.shipped += 1

    def status(self) -> dict[str, int]:
        return {"shipped": self.shipped, "refused": self.refused}

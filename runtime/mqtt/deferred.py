"""Sends deferred cloud fallbacks when the cloud is back and publishes their answers.

One entry of the store's ``cloud`` stream at a time (the spool's forwarder, window 1, so
requests reach the cloud in the order they were deferred): the cloud call, then the answer
published to ``deferred/<adapter>`` at QoS >= 1; the forwarder acks the entry on that
PUBACK. An unreachable cloud fails the send after a pause of ``cloud.breaker_reset_s``
(the breaker's own rhythm: no hot retry loop) and the forwarder starts again from this
entry; a cloud that refuses the request (4xx) gets its refusal published as an error
answer, so one bad request cannot block the stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from wasmgate.runtime.cloud.policy import CloudClient
from wasmgate.runtime.errors import CloudUnavailable
from wasmgate.runtime.field.deferral import DEFERRED_ID
from wasmgate.runtime.field.store import Record
from wasmgate.runtime.mqtt.messages import JSON, Outgoing, error_body

log = logging.getLogger("wasmgate.mqtt")


class DeferredSender:
    """``send`` for the spool's ``cloud`` forwarder."""

    def __init__(
        self,
        cloud: CloudClient,
        publish: Callable[[Outgoing], asyncio.Future[None]],
        topic_of: Callable[[str], str],
        *,
        qos: int,
        retry_s: float,
    ) -> None:
        self._cloud = cloud
        self._publish = publish
        self._topic_of = topic_of
        self._qos = max(1, qos)
        self._retry_s = retry_s
        self.answered = 0
        self.refused = 0

    def send(self, rec: Record) -> asyncio.Future[None]:
        return asyncio.ensure_future(self._resolve(rec))

    async def _resolve(self, rec: Record) -> None:
        meta = rec.meta
        adapter, reason = str(meta["adapter"]), str(meta.get("reason", ""))
        content_type = meta.get("content_type")
        props = [(DEFERRED_ID, str(rec.id)), ("source", "cloud")]
        try:
            body = await self._cloud.infer_adapter(
                adapter, rec.payload, content_type if isinstance(content_type, str) else None,
                f"deferred: {reason}",
            )  # fmt: skip
            status, answer_type = 200, str(meta.get("answer_type") or "application/octet-stream")
            self.answered += 1
        except CloudUnavailable as e:
            if not e.refused:
                log.info("cloud still unreachable for deferred %d: %s", rec.id, e)
                await asyncio.sleep(self._retry_s)
                raise
            status, answer_type, body = 502, JSON, error_body(str(e), 502, None)
            self.refused += 1
        msg = Outgoing(
            self._topic_of(str(meta.get("mqtt") or adapter)),
            body,
            self._qos,
            content_type=answer_type,
            user_properties=(*props, ("status", str(status))),
        )
        await self._publish(msg)

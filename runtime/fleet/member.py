"""The daemon as a fleet member: one owner for the reconciler, the delivery and the report.

Wiring (``runtime/compose/app.py``)::

    async with FleetMember(settings, registry, verify, pull, metrics) as fleet:
        bridge = MqttBridge(..., channels=[fleet.channel()])   # when MQTT is on
        fleet.use_mqtt(bridge.client)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from wasmgate._compat import UTC, Self
from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.fleet.apply import Pull, PullDeferred
from wasmgate.runtime.fleet.delivery import Delivery, desired_topics
from wasmgate.runtime.fleet.reconcile import Backoff, Reconciler, Settle, Verify
from wasmgate.runtime.fleet.report import Reporter
from wasmgate.runtime.fleet.state import Plan, Want
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.signing.errors import FleetScopeError
from wasmgate.signing.trust import TrustStore

if TYPE_CHECKING:  # oras (pull), paho (mqtt) and fleet documents load only when used
    from wasmgate.runtime.fleet.pull import BundlePuller
    from wasmgate.runtime.mqtt.messages import Outgoing
    from wasmgate.signing.fleetdoc import FleetDoc


class Publisher(Protocol):
    """The part of `MqttClient` the report needs."""

    @property
    def connected(self) -> bool: ...
    def publish(self, msg: Outgoing) -> asyncio.Future[None]: ...


class FleetMember:
    """Starts the reconciler and the delivery on entry, closes both on exit."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        verify: Verify,
        pull: Pull,
        metrics: Metrics | None = None,
        *,
        settle: Settle | None = None,
    ) -> None:
        """``settle``: until every process serves what the registry now serves (a
        supervisor's workers are replaced after a change); the report waits for it."""
        fleet, mqtt = settings.fleet, settings.mqtt
        self.gateway = mqtt.resolved_gateway_id()
        backoff = Backoff(fleet.retry_initial_s, fleet.retry_max_s)
        state_dir = settings.paths.resolved("state_dir")
        self.reconciler = Reconciler(registry, state_dir, verify, pull, backoff, settle=settle)
        topics = desired_topics(mqtt.topic_prefix, self.gateway, fleet.groups)
        self.delivery = Delivery(
            self.reconciler, topics, fleet.desired_file, fleet.max_document_bytes
        )
        self.reporter = Reporter(self.reconciler, registry, self.gateway, fleet.groups, metrics)
        self.report_topic = f"{mqtt.topic_prefix.rstrip('/')}/{self.gateway}/deployment"
        self._client: Publisher | None = None
        self._outgoing: bytes | None = None
        """The report waiting for the end of this loop turn (see `_send`)."""
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Self:
        await self._stack.enter_async_context(self.reconciler)
        await self._stack.enter_async_context(self.delivery.running())
        self._stack.callback(self.reporter.close)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.reporter.attach(None)
        await self._stack.aclose()

    def channel_args(self) -> dict[str, Any]:
        """Arguments of the bridge's `Channel` (no paho import here)."""
        return {
            "filters": self.delivery.topics,
            "on_message": self.delivery.on_message,
            "on_connect": self._connected,
        }

    @contextlib.asynccontextmanager
    async def over_mqtt(self, client: Publisher) -> AsyncIterator[None]:
        """Publish the report through ``client`` while the block runs."""
        self._client = client
        if client.connected:
            self._connected()
        try:
            yield
        finally:
            self._client = None
            self.reporter.attach(None)

    def _connected(self) -> None:
        """After every (re)connect: the latest report, then every change while connected.

        Reports are never queued while disconnected: a stale one flushed after the fresh
        one would become the retained report."""
        if self._client is not None:
            self.reporter.attach(self._send)

    def _send(self, payload: bytes) -> None:
        """Publish the latest report once this loop turn ends: the changes one step makes
        together (the last bundle applied, then the document) leave as one message."""
        first = self._outgoing is None
        self._outgoing = payload
        if first:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        from wasmgate.runtime.mqtt.messages import Outgoing  # noqa: PLC0415 - paho with MQTT only

        payload, self._outgoing = self._outgoing, None
        client = self._client
        if payload is None or client is None or not client.connected:
            return
        fut = client.publish(Outgoing(self.report_topic, payload, qos=1, retain=True))
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def reread(self) -> None:
        """SIGHUP: the desired file and the held MQTT document are offered again."""
        await self.delivery.reread()


def fleet_verifier(
    trust: Callable[[], TrustStore], gateway: str, groups: tuple[str, ...]
) -> Verify:
    """`verify_fleet` against the trust in force, then the target: a document addressed to
    another group or other gateways is refused (`FleetScopeError`) like any bad one."""

    def verify(data: bytes, last_serial: int | None) -> Plan:
        # Imported here: a daemon that is never sent a document never builds their models.
        from wasmgate.signing.fleetdoc import verify_fleet  # noqa: PLC0415

        doc = verify_fleet(data, trust(), last_serial=last_serial, now=datetime.now(UTC))
        target = doc.target
        if target.group is not None and target.group not in groups:
            raise FleetScopeError(
                f"fleet document serial {doc.serial}: for group {target.group!r}, and this "
                f"gateway is in {list(groups)} (fleet.groups)"
            )
        if target.gateways is not None and gateway not in target.gateways:
            raise FleetScopeError(
                f"fleet document serial {doc.serial}: for other gateways, not {gateway!r}"
            )
        return plan_of(doc)

    return verify


def plan_of(doc: FleetDoc) -> Plan:
    """What the reconciler keeps of a verified document."""
    wants = tuple(
        Want(name=b.name, version=b.version, ref=b.ref, staged_percent=b.staged_percent)
        for b in doc.bundles
    )
    return Plan(
        serial=doc.serial, bundles=wants, downgrades={d.name: d.version for d in doc.downgrades}
    )


PULL_CACHE_MAX_AGE_S = 24 * 3600.0
"""Pulled bundles older than this are dropped from ``<state_dir>/pulled`` after each pull."""


def registry_pull(settings: Settings) -> Pull:
    """oci's `BundlePuller` as the reconciler's `Pull`: an unreachable registry (after the
    puller's own retries) defers the bundle; every other error (a refused artifact) fails it."""
    # Built at the first pull: oras, requests and jsonschema (~70 ms, ~6 MB) load only in a
    # daemon whose fleet document names a registry bundle, not at every start.
    built: list[BundlePuller] = []

    async def pull(ref: str) -> Path:
        from wasmgate.runtime.fleet.pull import BundlePuller  # noqa: PLC0415
        from wasmgate.runtime.oci.ocitypes import RegistryUnavailable  # noqa: PLC0415

        if not built:
            built.append(BundlePuller.for_daemon(settings))
        puller = built[0]
        try:
            pulled = await puller.pull(ref)
        except RegistryUnavailable as e:
            raise PullDeferred(str(e)) from e
        keep = (pulled.digest, pulled.layer_digest)
        await asyncio.to_thread(puller.cache.prune_stale, PULL_CACHE_MAX_AGE_S, keep)
        return pulled.path

    return pull

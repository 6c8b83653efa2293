"""Stage two of the daemon's start (`wasmgate.runtime.compose.opening`): what needs the bundles.

`load_bundles` fills the registry (the store's bundles, then the bundle directory's files);
`stages` are entered after it, in order, and closed in reverse: the bundle-directory
watcher and expiry checks; the gRPC listener, when ``grpc.port`` is set (grpc is imported
only then); the fleet member (`FleetMember`: reconcile, delivery, report), which resumes the
document a restart interrupted; the MQTT bridge, when ``mqtt.host`` is set (it also carries
the fleet's topics).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from wasmgate.runtime.bundles.expiry import expiry_watch
from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.bundles.watcher import bundle_files
from wasmgate.runtime.compose.app_keys import (
    BUNDLE_STORE,
    CLOUD,
    DEDUPE_TABLE,
    DEPS,
    FORWARD,
    GRPC,
    LOG_LIMITS,
    NOTIFIER,
    REPLACES,
    ROLE,
    SETTLE,
    STORE,
    WATCHER,
    WORKER_INDEX,
    Role,
)
from wasmgate.runtime.compose.opening import Stage
from wasmgate.runtime.dataplane.repository import Repository
from wasmgate.runtime.field.deferral import StoredDeferrals
from wasmgate.runtime.fleet.member import FleetMember, fleet_verifier, registry_pull
from wasmgate.runtime.http import status
from wasmgate.runtime.http.keys import (
    FLEET,
    LIVE,
    METRICS,
    REGISTRY,
    SERVICE,
    SETTINGS,
    TRACING,
)
from wasmgate.runtime.http.shm import REGIONS
from wasmgate.runtime.http.variables import VARIABLES
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.memory import trim_heap
from wasmgate.runtime.ops.tasks import background, process_gone
from wasmgate.sandbox import SandboxEngine

if TYPE_CHECKING:  # paho loads only with MQTT
    from wasmgate.runtime.mqtt import Channel
    from wasmgate.runtime.mqtt.dedupe_shared import SharedRecent

__all__ = ["deferrer", "load_bundles", "stages"]

log = logging.getLogger("wasmgate.app")

_EXTEND_US = 120_000_000
_Part = Callable[[web.Application], AsyncIterator[None]]


async def load_bundles(app: web.Application) -> None:
    """Stage two's first step: serve what the store holds, then the directory's files."""
    registry, watcher, notifier = app[REGISTRY], app[WATCHER], app[NOTIFIER]
    worker = app[ROLE] == "worker"
    # A worker serves what the store holds: the folder's files are the supervisor's to
    # install (one writer of the store), as are the module cache's pruning and leftovers.
    files = [] if worker else bundle_files(app[SETTINGS].paths.resolved("bundle_dir"))

    def progress(what: str) -> None:
        # Each bundle may take a while (compile, model optimisation): extend systemd's
        # start timeout per bundle instead of one huge TimeoutStartSec.
        notifier.notify(f"EXTEND_TIMEOUT_USEC={_EXTEND_US}", f"STATUS={what}")

    # A worker starts beside a running supervisor: it must not take the supervisor's
    # install in progress for a crash's leftovers (its staged blobs, its upload).
    refused = await registry.start(files, progress, collect=not worker)
    watcher.mark_seen(files, refused)
    engine = app[DEPS].engine
    if not worker:
        _prune_modules(registry, engine)  # only now: start-up compiles found their entries
        registry.on_change.append(lambda: _prune_modules(registry, engine))
    # Loading freed large model buffers in worker threads' malloc arenas (~20 MB idle with a
    # MobileNet-class model); trim now and after every change of what serves.
    trim_heap()
    registry.on_change.append(trim_heap)


async def _watch_ctx(app: web.Application) -> AsyncIterator[None]:
    async with app[WATCHER].running(), expiry_watch(app[REGISTRY]):
        yield


def deferrer(app: web.Application) -> StoredDeferrals | None:
    """Deferred cloud fallbacks: on with a cloud, ``cloud.defer`` and MQTT (their answers'
    way back); a bundle still has to ask for it (``fallback.defer``)."""
    settings = app[SETTINGS]
    if CLOUD not in app or not settings.cloud.defer or settings.mqtt.host is None:
        return None
    from wasmgate.runtime.mqtt.topics import Topics  # noqa: PLC0415 - paho only with MQTT

    return StoredDeferrals(app[STORE], Topics(settings.mqtt).deferred)


def _prune_modules(registry: Registry, engine: SandboxEngine) -> None:
    """Drop compiled modules no installed bundle version uses (the cache never shrank)."""
    keep = {
        b.adapter_sha256
        for slot in registry.table.slots().values()
        for b in slot.versions()
        if b.adapter_sha256 is not None
    }
    removed = engine.prune(keep)
    if removed:
        log.info("module cache pruned", extra={"removed": removed, "kept": len(keep)})


async def _grpc_ctx(app: web.Application) -> AsyncIterator[None]:
    from wasmgate.runtime.grpc.server import GrpcListener  # noqa: PLC0415 - grpc only when used

    live = app[LIVE]  # the management token in force now (a reload applies at once)
    repository = Repository(app[REGISTRY].table, lambda: live.settings.http.management_token)
    listener = GrpcListener(
        app[SETTINGS],
        app[SERVICE],
        app[METRICS],
        app[TRACING],
        app.get(REGIONS),
        repository=repository,
        gateway=app.get(FORWARD),  # a worker's: on the shared port, relays to the supervisor
    )
    async with listener:
        app[GRPC] = listener
        status.add_provider(app, "grpc", listener.status)
        yield


async def _fleet_ctx(app: web.Application) -> AsyncIterator[None]:
    store, settings = app[BUNDLE_STORE], app[SETTINGS]
    gateway = settings.mqtt.resolved_gateway_id()
    verify = fleet_verifier(lambda: store.trust, gateway, settings.fleet.groups)
    pull = registry_pull(settings)
    member = FleetMember(
        settings, app[REGISTRY], verify, pull, app[METRICS], settle=app.get(SETTLE)
    )
    async with member as fleet:
        app[FLEET] = fleet
        status.add_provider(app, "fleet", fleet.reporter.document)
        yield


async def _mqtt_ctx(app: web.Application) -> AsyncIterator[None]:
    """The gateway's MQTT connection: its status, metadata, the fleet's and variables'
    topics, the stored streams' drain, and the requests unless workers serve them."""
    from wasmgate.runtime.mqtt import Channel, MqttBridge  # noqa: PLC0415 - paho only when used
    from wasmgate.runtime.mqtt.spool import Stored  # noqa: PLC0415

    settings = app[SETTINGS]
    registry = app[REGISTRY]
    fleet = app[FLEET]
    supervisor = app[ROLE] == "supervisor"
    async with contextlib.AsyncExitStack() as stack:
        bridge_for = MqttBridge(
            settings.mqtt,
            app[SERVICE],
            drain_s=settings.drain_s,
            metrics=app[METRICS],
            tracing=app[TRACING],
            stored=Stored(
                app[STORE],
                settings.store,
                cloud=app[CLOUD] if deferrer(app) is not None else None,
                cloud_retry_s=settings.cloud.breaker_reset_s,
                samples=settings.samples.sink == "mqtt",
                samples_topic=settings.samples.mqtt_topic,
            ),
            channels=[_variables_channel(app), Channel(**fleet.channel_args())],
            recent=stack.enter_context(_shared_recent(app)) if supervisor else None,
            serves_requests=not supervisor,
        )
        bridge = await stack.enter_async_context(bridge_for)
        await stack.enter_async_context(fleet.over_mqtt(bridge.client))
        registry.on_change.append(bridge.refresh_metadata)
        status.add_provider(app, "mqtt", bridge.status)
        app[METRICS].watch_mqtt(lambda: bridge.state.client)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                registry.on_change.remove(bridge.refresh_metadata)


async def _mqtt_worker_ctx(app: web.Application) -> AsyncIterator[None]:
    """A worker's own connection: the gateway's requests through a shared subscription
    (each reaches one worker); answers kept while the broker is away go to the store the
    supervisor drains. The variables' document is the supervisor's: it passes it on.

    A replacing worker connects once the worker it replaces has ended: both have the same
    client id, and two connections of one id take the session from each other in turn
    (each reconnect kicks the other off). Its requests meanwhile go to the other workers."""
    async with background(_mqtt_worker(app), "mqtt-worker"):
        yield


async def _mqtt_worker(app: web.Application) -> None:
    from wasmgate.runtime.mqtt import MqttBridge  # noqa: PLC0415 - paho only when used
    from wasmgate.runtime.mqtt.spool import Stored  # noqa: PLC0415
    from wasmgate.runtime.mqtt.topics import worker_settings  # noqa: PLC0415

    if REPLACES in app:
        await process_gone(app[REPLACES])
    settings = app[SETTINGS]
    with _shared_recent(app) as recent:
        bridge_for = MqttBridge(
            worker_settings(settings.mqtt, app[WORKER_INDEX]),
            app[SERVICE],
            drain_s=settings.drain_s,
            metrics=app[METRICS],
            tracing=app[TRACING],
            stored=Stored(app[STORE], settings.store),
            recent=recent,
            speaks=False,
            log_limits=app.get(LOG_LIMITS),
        )
        async with bridge_for as bridge:
            status.add_provider(app, "mqtt", bridge.status)
            await asyncio.Event().wait()  # until the worker stops (a cancel)


def _variables_channel(app: web.Application) -> Channel:
    from wasmgate.runtime.mqtt import Channel  # noqa: PLC0415 - paho only when used
    from wasmgate.runtime.mqtt.messages import Incoming  # noqa: PLC0415
    from wasmgate.runtime.mqtt.topics import Topics  # noqa: PLC0415

    registry, variables = app[REGISTRY], app[VARIABLES]

    def apply_variables(msg: Incoming) -> None:
        # Retained on purpose: the broker replays the document at every (re)connect.
        variables.apply_document(registry.table, msg.payload)

    return Channel((Topics(app[SETTINGS].mqtt).variables,), apply_variables)


def _shared_recent(app: web.Application) -> contextlib.closing[SharedRecent]:
    from wasmgate.runtime.mqtt.dedupe_shared import SharedRecent  # noqa: PLC0415

    mqtt = app[SETTINGS].mqtt
    table = SharedRecent(app[DEDUPE_TABLE], mqtt.dedupe_window_s, mqtt.dedupe_max_entries)
    return contextlib.closing(table)


def stages(settings: Settings, role: Role = "single") -> list[Stage]:
    """Stage two's parts for these settings and this process, in the order they start.

    A worker starts only the data plane's listeners; the supervisor everything else."""
    if role == "worker":
        return [contextlib.asynccontextmanager(part) for part in _worker_parts(settings)]
    parts = [_watch_ctx]
    if settings.grpc.port is not None:
        parts.append(_grpc_ctx)
    parts.append(_fleet_ctx)
    if settings.mqtt.host is not None:
        parts.append(_mqtt_ctx)
    return [contextlib.asynccontextmanager(part) for part in parts]


def _worker_parts(settings: Settings) -> list[_Part]:
    """A data-plane worker's stage two (the supervisor's parts are in `stages`)."""
    parts: list[_Part] = [_catch_up_ctx]
    if settings.grpc.port is not None:
        parts.append(_grpc_ctx)
    if settings.mqtt.host is not None:
        parts.append(_mqtt_worker_ctx)
    return parts


async def _catch_up_ctx(app: web.Application) -> AsyncIterator[None]:
    """The gateway's repository, shared-memory and variable calls so far, applied before
    this worker's listeners accept (`Forwarder.catch_up`)."""
    await app[FORWARD].catch_up()
    yield

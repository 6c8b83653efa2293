"""The composition root: settings in, a fully wired aiohttp application out.

Every long-lived resource is created, stored under a typed `AppKey` and closed by one
aiohttp ``cleanup_ctx`` entry, in this order (closed in reverse):

0. tracing (`Tracing`: the OpenTelemetry SDK only when ``telemetry.otlp_endpoint`` is set),
   closed last so the spans of the drain are exported;
1. adapter state (SQLite in the state dir, closed last), worker pool (guests and
   un-batched models), the shared batch dispatcher, the watchdog that stops backend runs
   at their deadline, sandbox engine, device profile, backends;
2. the store-and-forward queue (``[store]``, SQLite under the state dir): a corrupt or
   locked file stops the start with one line naming it, nothing is deleted; the samples'
   OCI sink, when ``samples.oci_repository`` is set; the cloud fallback client, when
   ``cloud.url`` is set (`wasmgate.runtime.compose.app_field`);
3. the shared-memory regions clients register (`wasmgate.runtime.shm`), none at start,
   all unmapped after the service drained; bundle store + registry + `InferenceService`,
   empty (`wasmgate.runtime.compose.app_service`); on close the service drains, then unloads;
4. stage two (`wasmgate.runtime.compose.opening`; the daemon listens before it, so the status page
   shows its progress): the start-up bundles loaded, then the bundle-directory watcher and
   expiry checks, the gRPC listener when ``grpc.port`` is set (grpc is imported only then),
   the fleet member (`FleetMember`: reconcile, delivery, report), which resumes the
   document a restart interrupted, and the MQTT bridge when ``mqtt.host`` is set (it also
   carries the fleet's topics). Ready only once all of it is up.
No module-level singletons: two apps in one process share nothing.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator

from aiohttp import web

from wasmgate.device_profiles import DeviceProfile, ProfileError, detect, load_profile
from wasmgate.runtime.backends.watchdog import Watchdog
from wasmgate.runtime.backends.weight_share import WeightClient, WeightServer, WeightShare
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.bundles.kv import FILE_NAME as STATE_FILE
from wasmgate.runtime.bundles.kv import StateDb
from wasmgate.runtime.bundles.loader import LoaderDeps
from wasmgate.runtime.bundles.variables import FILE_NAME as VARIABLES_FILE
from wasmgate.runtime.bundles.variables import Variables
from wasmgate.runtime.compose import app_field
from wasmgate.runtime.compose.app_keys import (
    DEPS,
    FORWARD,
    LOG_LIMITS,
    NOTIFIER,
    OPENING,
    POOL,
    ROLE,
    SERVICE_IMPL,
    SLOTS,
)
from wasmgate.runtime.compose.app_open import load_bundles, stages
from wasmgate.runtime.compose.app_service import service_ctx
from wasmgate.runtime.compose.opening import Opening
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.http import (
    edge,
    manage,
    metrics,
    openapi,
    outcomes,
    repository,
    status,
    v2,
)
from wasmgate.runtime.http import variables as variable_routes
from wasmgate.runtime.http.connections import ConnectionGuard
from wasmgate.runtime.http.forward import Forwarder
from wasmgate.runtime.http.keys import (
    CONNECTIONS,
    CPUS,
    LIVE,
    METRICS,
    SETTINGS,
    TRACING,
)
from wasmgate.runtime.http.shm import REGIONS
from wasmgate.runtime.http.variables import VARIABLES
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.live import LiveSettings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.ops.throttle_shared import SharedThrottle
from wasmgate.runtime.ops.tracing import Tracing
from wasmgate.runtime.serving.scheduler import FairPool
from wasmgate.runtime.serving.slots import GatewaySlots
from wasmgate.runtime.shm.registry import Regions
from wasmgate.sandbox import Ceilings, SandboxEngine
from wasmgate.sandbox.limits import MIB

log = logging.getLogger("wasmgate.app")


def build_app(
    settings: Settings,
    live: LiveSettings | None = None,
    notifier: Notifier | None = None,
    *,
    listen_first: bool = False,
    cpus: CpuPlan | None = None,
    forward: Forwarder | None = None,
    slots: GatewaySlots | None = None,
    supervisor: bool = False,
) -> web.Application:
    """Build the app; nothing is started until the runner sets it up.

    ``listen_first`` (the daemon): the runner's setup returns before the start-up bundles
    are loaded; ``app[OPENING].done`` says when they are (`wasmgate.runtime.compose.opening`).
    ``cpus``: where the daemon's threads run (default: this process's affinity, unpinned).
    ``forward``: a data-plane worker's way to the supervisor (`wasmgate.runtime.http.forward`):
    only the data plane is served here (with gRPC on the gateway's shared port), and stage
    two starts no watcher, fleet member or MQTT (the supervisor's). ``slots``: the
    gateway's running slots, shared by the supervisor and its workers. ``supervisor``: this
    app is a supervisor's (its workers serve the data plane)."""
    app = web.Application(client_max_size=settings.http.max_body_bytes)
    app[SETTINGS] = settings
    app[ROLE] = "worker" if forward is not None else "supervisor" if supervisor else "single"
    if forward is not None:
        app[FORWARD] = forward
    if slots is not None:
        app[SLOTS] = slots
        app.cleanup_ctx.append(_shared_log_limits)  # first: closed after everything else
    app[CPUS] = cpus = cpus or CpuPlan.current()
    status.add_provider(app, "cpus", cpus.describe)
    app[LIVE] = live or LiveSettings(settings)
    app[NOTIFIER] = notifier or Notifier({})
    app[METRICS] = Metrics()
    http = settings.http
    app[CONNECTIONS] = guard = ConnectionGuard(http.max_connections, http.max_connections_per_peer)
    app[TRACING] = Tracing(settings.telemetry, settings.mqtt.gateway_id or socket.gethostname())
    edge.setup(app, guard, http.allowed_hosts, app[TRACING], forward)
    v2.setup(app)
    metrics.setup(app)
    status.setup(app)
    manage.setup(app)
    repository.setup(app)
    variable_routes.setup(app)
    openapi.setup(app)
    if forward is not None:  # a worker's own socket only: the supervisor's calls
        outcomes.setup(app)  # its staged releases' gates read it
        variable_routes.setup_worker(app)  # the MQTT variables document
    edge.finish(app)  # the catch-all, after every route
    app.cleanup_ctx.append(_tracing_ctx)
    app.cleanup_ctx.append(_engine_ctx)
    app.cleanup_ctx.append(app_field.store_ctx)
    if settings.samples.sink == "oci" and forward is None:  # one process sends the samples
        app.cleanup_ctx.append(app_field.samples_oci_ctx)
    if settings.cloud.url is not None:
        app.cleanup_ctx.append(app_field.cloud_ctx)
    app.cleanup_ctx.append(_shm_ctx)
    app.cleanup_ctx.append(service_ctx)
    # Stage two (`wasmgate.runtime.compose.app_open`): after the start-up bundles are loaded.
    parts = stages(settings, app[ROLE])
    app[OPENING] = opening = Opening(
        load_bundles, parts, lambda a: a[SERVICE_IMPL].opened(), background=listen_first
    )
    app.cleanup_ctx.append(opening.ctx)
    return app


def configured_profile(settings: Settings) -> DeviceProfile:
    """The configured device profile, or the detected one; ConfigError when unusable."""
    try:
        if settings.profile is not None:
            return load_profile(settings.profile)
        detection = detect()
    except ProfileError as e:
        raise ConfigError(f"device profile: {e}") from e
    log.info("device profile detected", extra={"profile": detection.profile.name})
    return detection.profile


def ceilings(settings: Settings) -> Ceilings:
    lim = settings.limits
    return Ceilings(
        memory_bytes=lim.memory_mb * MIB,
        deadline_s=lim.deadline_ms / 1000,
        fuel=lim.fuel,
        max_output_bytes=lim.max_output_bytes,
        max_log_bytes=lim.max_log_bytes,
        max_module_bytes=lim.max_module_bytes,
        compile_timeout_s=lim.compile_timeout_s,
        compile_memory_bytes=lim.compile_memory_mb * MIB,
        spare_instances=lim.spare_instances,
        fuel_enabled=True,  # a manifest's fuel limit is honoured (see limits.fuel)
    )


async def _shared_log_limits(app: web.Application) -> AsyncIterator[None]:
    """A client error's log line once a minute for the gateway, not per worker."""
    shared = SharedThrottle(app[SLOTS].path.with_name("log-limits"))
    app[METRICS].failures.share_log_limit(shared)
    app[LOG_LIMITS] = shared
    yield
    shared.close()


async def _tracing_ctx(app: web.Application) -> AsyncIterator[None]:
    with app[TRACING]:
        yield


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    cache = settings.paths.resolved("cache_dir")
    cpus = app[CPUS].count  # the CPUs this process may use, not the machine's
    workers = settings.limits.workers or 2 * cpus
    profile = configured_profile(settings)
    m = app[METRICS]
    # The pool closes first: a guest still running needs the epoch ticker to reach its
    # deadline, and the ticker stops with the engine.
    batch_workers = settings.limits.batch_workers or cpus
    state_dir = settings.paths.resolved("state_dir")
    variables = Variables(state_dir / VARIABLES_FILE, settings.variables)
    with (
        _weights(app) as weights,
        StateDb(state_dir / STATE_FILE) as state,
        SandboxEngine(cache / "modules", ceilings(settings)) as engine,
        Watchdog(on_fire=m.observe_cancelled) as watchdog,
        BatchDispatcher(batch_workers) as dispatcher,
        FairPool(workers, max_tenant_workers=settings.limits.max_tenant_workers) as pool,
    ):
        deps = LoaderDeps(
            engine=engine,
            profile=profile,
            limits=settings.limits,
            cache_dir=cache / "models",
            batch_hook=lambda model: lambda rows, _n, _s: m.observe_batch(model, rows),
            dispatcher=dispatcher,
            watchdog=watchdog,
            state=state,
            variables=variables,
            cpus=app[CPUS],
            weights=weights,
        )
        app[POOL], app[DEPS], app[VARIABLES] = pool, deps, variables
        try:
            yield
        finally:
            deps.close()


@contextlib.contextmanager
def _weights(app: web.Application) -> Iterator[WeightShare | None]:
    """Model weights shared by the gateway's processes: the supervisor splits and serves
    them on a socket in its run folder, each worker asks there; a single process keeps its
    own (`wasmgate.runtime.backends.weight_share`)."""
    slots = app.get(SLOTS)
    if app[ROLE] == "single" or slots is None or not app[SETTINGS].workers.share_weights:
        yield None
        return
    path = slots.path.with_name("weights.sock")
    if app[ROLE] == "worker":
        yield WeightClient(path)
        return
    with WeightServer(path) as server:
        yield server


async def _shm_ctx(app: web.Application) -> AsyncIterator[None]:
    """The shared-memory regions clients register: none at start, all unmapped at the end
    (after the service drained, so no request still reads one)."""
    regions = Regions(app[SETTINGS].shared_memory)
    app[REGIONS] = regions
    if regions.settings.enabled:
        status.add_provider(app, "shared_memory", regions.summary)
    try:
        yield
    finally:
        regions.close()

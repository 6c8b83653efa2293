"""The composition root's own application keys (the routes' are in `wasmgate.runtime.http.keys`).

Shared by the two stages of the start (`wasmgate.runtime.compose.app`,
`wasmgate.runtime.compose.app_open`) and the daemon's lifecycle (`wasmgate.runtime.compose.daemon`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from aiohttp import web

from wasmgate.runtime.bundles.loader import LoaderDeps
from wasmgate.runtime.bundles.watcher import DirWatcher
from wasmgate.runtime.compose.opening import Opening
from wasmgate.runtime.field.store import Store
from wasmgate.runtime.http.forward import Forwarder
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.ops.throttle_shared import SharedThrottle
from wasmgate.runtime.serving.scheduler import FairPool
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.runtime.serving.slots import GatewaySlots
from wasmgate.signing.store import BundleStore

if TYPE_CHECKING:  # the cloud client loads only in a daemon with cloud.url, grpc with grpc.port
    from wasmgate.runtime.cloud.client import CloudFallback
    from wasmgate.runtime.grpc.server import GrpcListener

__all__ = [
    "BUNDLE_STORE",
    "CLOUD",
    "DEDUPE_TABLE",
    "DEPS",
    "FORWARD",
    "GRPC",
    "NOTIFIER",
    "OPENING",
    "POOL",
    "REPLACES",
    "ROLE",
    "SERVICE_IMPL",
    "SETTLE",
    "SLOTS",
    "STORE",
    "WATCHER",
    "WORKER_INDEX",
    "Role",
]

DEPS = web.AppKey("loader_deps", LoaderDeps)
WATCHER = web.AppKey("bundle_watcher", DirWatcher)
POOL = web.AppKey("worker_pool", FairPool)
CLOUD: web.AppKey[CloudFallback] = web.AppKey("cloud_fallback")
STORE = web.AppKey("field_store", Store)
NOTIFIER = web.AppKey("notifier", Notifier)
BUNDLE_STORE = web.AppKey("bundle_store", BundleStore)
SERVICE_IMPL = web.AppKey("inference_service", InferenceService)
"""The service as built here (``SERVICE`` holds it as the protocol the routes use)."""
OPENING = web.AppKey("opening", Opening)
SLOTS = web.AppKey("gateway_slots", GatewaySlots)
"""The gateway's running slots, with workers (`wasmgate.runtime.serving.slots`)."""

Role = Literal["single", "supervisor", "worker"]
ROLE: web.AppKey[Role] = web.AppKey("process_role")
"""Which process this app is (`wasmgate.runtime.compose.app_open.stages` starts its parts):
the single daemon, a supervisor (``[workers] count`` > 1) or one of its workers."""
FORWARD = web.AppKey("supervisor_forward", Forwarder)
"""A worker's way to its supervisor (a worker only)."""
GRPC: web.AppKey[GrpcListener] = web.AppKey("grpc_listener")
"""The gRPC listener, while it runs (a worker stops it with its HTTP side)."""
WORKER_INDEX = web.AppKey("worker_index", int)
"""A worker's index among its supervisor's workers, 0-based (a worker only)."""
DEDUPE_TABLE = web.AppKey("mqtt_dedupe_table", Path)
"""The MQTT dedupe table of a supervisor and its workers (`runtime.mqtt.dedupe_shared`)."""
LOG_LIMITS = web.AppKey("log_limits", SharedThrottle)
"""Repeated warnings' rate limits kept for the whole gateway, with workers
(`wasmgate.runtime.ops.throttle_shared`)."""
REPLACES = web.AppKey("replaces_pid", int)
"""The pid of the worker this one replaces, while it finishes (a replacing worker only)."""
SETTLE: web.AppKey[Callable[[], Awaitable[None]]] = web.AppKey("settle")
"""A supervisor's: until every worker serves what its registry serves (the fleet's report
waits for it before it says applied)."""

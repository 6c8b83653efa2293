"""Typed aiohttp application keys for the objects the app owns.

Routes read collaborators through these keys (``request.app[SERVICE]``); the composition
root (`wasmgate.runtime.compose.app`) stores them from cleanup_ctx entries before the server starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web

from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.fleet.member import FleetMember
from wasmgate.runtime.http.connections import ConnectionGuard
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.live import LiveSettings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.tracing import Tracing
from wasmgate.runtime.served.api import ServiceAPI

SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", ServiceAPI)
CPUS = web.AppKey("cpus", CpuPlan)
"""The CPUs the process may use and the one its Python threads run on."""
"""The transport-neutral core every bridge calls (an `InferenceService` in the daemon)."""

METRICS = web.AppKey("metrics", Metrics)
"""The daemon's Prometheus metrics (optional: routes skip observing when it is absent)."""

StatusProvider = Callable[[], Mapping[str, object]]
"""Returns one JSON-able section of ``GET /v1/status`` (e.g. MQTT or cloud state)."""
STATUS_PROVIDERS = web.AppKey[dict[str, StatusProvider]]("status_providers")
"""Section name -> provider; register with `wasmgate.runtime.http.status.add_provider`."""

LIVE = web.AppKey("live_settings", LiveSettings)
"""The settings in force now (SIGHUP replaces ``.settings``); read per request."""
REGISTRY = web.AppKey("registry", Registry)
"""The bundle registry (management API, status, reload)."""
CONNECTIONS = web.AppKey("connections", ConnectionGuard)
"""Connection caps of the listener (the daemon's site uses it; the edge marks busy)."""
TRACING = web.AppKey("tracing", Tracing)
"""Trace context and spans (`wasmgate.runtime.ops.tracing`); its tracer starts with the app."""
FLEET = web.AppKey("fleet", FleetMember)
"""The fleet member (desired state in, deployment report out); ``PUT/GET /v1/desired``."""

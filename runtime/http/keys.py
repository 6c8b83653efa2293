"""Typed aiohttp application keys for the objects the app owns.

Routes read collaborators through these keys (``request.app[SERVICE]``); the composition
root (`wasmgate.runtime.app`) stores them from cleanup_ctx entries before the server starts.
"""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.config import Settings
from wasmgate.runtime.service_api import ServiceAPI

SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", ServiceAPI)
"""The transport-neutral core every bridge calls (an `InferenceService` in the daemon)."""

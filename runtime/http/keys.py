"""Typed aiohttp application keys for the objects the app owns."""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.config import Settings

SETTINGS = web.AppKey("settings", Settings)

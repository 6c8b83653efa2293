"""Helpers the HTTP routes share: the request's route facts, body reading, latency headers."""

from __future__ import annotations

from aiohttp import web

from wasmgate._compat import timeout
from wasmgate.runtime.dataplane.answer import VERSION_HEADER
from wasmgate.runtime.dataplane.plane import DataPlane, Route
from wasmgate.runtime.errors import PayloadTooLarge
from wasmgate.runtime.http.keys import METRICS, SERVICE, SETTINGS
from wasmgate.runtime.ops.config import HttpSettings
from wasmgate.runtime.served import timeouts

TIMEOUT_HEADER = "X-Wasmgate-Timeout-Ms"
"""Optional request header: answer within this many milliseconds or get 504."""
CANARY_KEY_HEADER = "X-Wasmgate-Canary-Key"
"""Request header: the key whose hash picks the side of a staged release (else X-Request-Id)."""
KEY_FIELD = f"{CANARY_KEY_HEADER} / X-Request-Id"


def plane(request: web.Request) -> DataPlane:
    """The data plane on this app's service and metrics (two references: built per call)."""
    return DataPlane(request.app[SERVICE], request.app.get(METRICS))


def route_of(request: web.Request) -> Route:
    """The request's deadline header, canary key, pinned version and transport facts (the
    data plane checks them and merges the V2 ``timeout`` parameter)."""
    headers = request.headers
    header = headers.get(TIMEOUT_HEADER)
    budget = None if header is None else timeouts.budget_s(header, TIMEOUT_HEADER)
    return Route(
        deadline=timeouts.after(budget),
        key=headers.get(CANARY_KEY_HEADER) or headers.get("X-Request-Id"),
        key_field=KEY_FIELD,
        pin=headers.get(VERSION_HEADER),
        pin_field=VERSION_HEADER,
        meta={"transport": "http", "client": request.remote or ""},
    )


async def read_body(request: web.Request) -> bytes:
    """The whole body, arriving within ``http.body_timeout_s`` (408 otherwise): a client
    trickling a body must not hold a handler and its connection for ever."""
    if request.content.is_eof():
        return await request.read()  # it came with the headers: nothing to wait for
    limit = _http(request).body_timeout_s
    try:
        async with timeout(limit):
            return await request.read()
    except TimeoutError:
        raise web.HTTPRequestTimeout(
            text=f"the request body did not arrive within http.body_timeout_s ({limit:g} s)"
        ) from None


def check_json_size(size: int | None, request: web.Request) -> None:
    """Refuse a JSON part over ``http.max_json_bytes`` (413) before it is parsed."""
    limit = _http(request).max_json_bytes
    if size is not None and size > limit:
        raise PayloadTooLarge(
            f"JSON of {size} bytes exceeds http.max_json_bytes ({limit}); "
            "send large tensors as binary data"
        )


def _http(request: web.Request) -> HttpSettings:
    settings = request.app.get(SETTINGS)
    return settings.http if settings is not None else HttpSettings()

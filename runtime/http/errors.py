"""The one place daemon errors become HTTP status codes (the MQTT bridge reuses `status_for`).

Every error answer is a V2 error body ``{"error": "<message>"}``. Daemon errors carry their
own message; aiohttp's HTTP exceptions (unknown route, wrong method, body over
``client_max_size``) keep their status with a JSON body; anything else is a bug: logged with
its traceback and answered 500 with a generic message so internals never leak.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from aiohttp import web

from wasmgate.runtime.errors import (
    BadRequest,
    Busy,
    DaemonError,
    DeadlineExceeded,
    FallbackFailed,
    InferenceFailed,
    NotFound,
    NotReady,
    PayloadTooLarge,
    Unauthorized,
)

log = logging.getLogger(__name__)

STATUS: Mapping[type[DaemonError], int] = MappingProxyType(
    {
        BadRequest: 400,
        Unauthorized: 401,
        NotFound: 404,
        PayloadTooLarge: 413,
        Busy: 429,
        InferenceFailed: 500,
        FallbackFailed: 500,
        NotReady: 503,
        DeadlineExceeded: 504,
    }
)
"""Daemon error type -> HTTP status (subclasses inherit their parent's status)."""

INTERNAL_ERROR = "internal server error"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status_for(exc: BaseException) -> int:
    """The status code of an error: the nearest mapped class in its MRO, else 500."""
    for cls in type(exc).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    if isinstance(exc, web.HTTPException):
        return exc.status
    return 500


def error_response(status: int, message: str) -> web.Response:
    # Exactly "application/json": the kserve SDK only reads the message for that string.
    headers = {"Content-Type": "application/json"}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    body = json.dumps({"error": message}).encode()
    return web.Response(body=body, status=status, headers=headers)


def _http_exception_message(exc: web.HTTPException) -> str:
    text = exc.text or ""
    # aiohttp's default texts start with "<status>: "; keep just the sentence.
    prefix = f"{exc.status}: "
    return text.removeprefix(prefix) if text else exc.reason


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except DaemonError as exc:
        status = status_for(exc)
        if status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, status, exc)
        return error_response(status, str(exc) or type(exc).__name__)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, _http_exception_message(exc))
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return error_response(500, INTERNAL_ERROR)


def setup(app: web.Application) -> None:
    """Install the error middleware (call before the app starts; order: first = outermost)."""
    app.middlewares.insert(0, error_middleware)

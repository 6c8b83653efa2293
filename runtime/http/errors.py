"""HTTP answers for errors, from the one table in `wasmgate.runtime.protocol.error_table`.

Every error answer is a V2 error body ``{"error": "<message>"}`` with content type exactly
``application/json``, on the data plane and the management API alike. Daemon errors are
answered with their table status; internal ones (and anything that is not a daemon error:
a bug) are logged with their traceback and answered with a generic message. aiohttp's HTTP
exceptions (unknown route, wrong method, body over ``client_max_size``) keep their status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from wasmgate.runtime.protocol.error_table import log_failure, public_message, status_of

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

BEARER_CHALLENGE = 'Bearer realm="wasmgate"'


def error_response(status: int, message: str) -> web.Response:
    # Exactly "application/json": the kserve SDK only reads the message for that string.
    headers = {"Content-Type": "application/json"}
    if status == 401:
        headers["WWW-Authenticate"] = BEARER_CHALLENGE
    body = json.dumps({"error": message}).encode()
    return web.Response(body=body, status=status, headers=headers)


# aiohttp's own words for a body over ``client_max_size`` (it keeps no attribute for it).
_TOO_LARGE = re.compile(r"Maximum request body size (\d+) exceeded")


def _http_exception_message(exc: web.HTTPException) -> str:
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        # Name the setting, so the one line says what to raise (the app's client_max_size
        # is http.max_body_bytes, runtime/compose/app.py).
        limit = _TOO_LARGE.search(exc.text or "")
        size = f" ({limit.group(1)} bytes)" if limit else ""
        return f"request body exceeds http.max_body_bytes{size}"
    text = exc.text or ""
    # aiohttp's default texts start with "<status>: "; keep just the sentence.
    prefix = f"{exc.status}: "
    return text.removeprefix(prefix) if text else exc.reason


def answer_error(request: web.Request, exc: Exception) -> web.Response:
    """The answer for an exception a handler raised (logged when it is ours to fix)."""
    if isinstance(exc, web.HTTPException) and exc.status >= 400:
        return error_response(exc.status, _http_exception_message(exc))
    answer = status_of(exc)
    log_failure("http", f"{request.method} {request.path}", exc, answer)
    return error_response(answer.status, public_message(exc, answer))


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return answer_error(request, exc)
    except Exception as exc:
        return answer_error(request, exc)


def setup(app: web.Application) -> None:
    """Install the error middleware (call before the app starts; order: first = outermost)."""
    app.middlewares.insert(0, error_middleware)

"""The daemon's one middleware: what every HTTP request passes through, outside in.

1. the connection guard's busy mark (`wasmgate.runtime.http.connections`): a connection
   whose request is in a handler is never closed to make room for a newcomer;
2. the ``http receive`` span of the inference routes (`wasmgate.runtime.http.traced`),
   outside the error mapping so error answers carry ``traceparent`` too;
3. the error mapping (`wasmgate.runtime.http.errors`): every failure is a V2 error body;
4. the Host allow-list and cross-site refusal (`wasmgate.runtime.http.origin`), inside the
   error mapping so its 403s are V2 error bodies as well.

One middleware, not four: each aiohttp middleware is a coroutine frame of its own on every
request, and on a tiny model's request the four cost as much as its inference.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

from wasmgate.runtime.http import errors, origin, traced
from wasmgate.runtime.http.connections import ConnectionGuard
from wasmgate.runtime.ops.tracing import Tracing

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Check = Callable[[web.Request], None]


async def _answer(request: web.Request, handler: Handler, check: Check) -> web.StreamResponse:
    """Steps 3 and 4: the checks, the handler, and the error body of whatever failed."""
    try:
        check(request)
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # a redirect is an answer, not a failure
        return errors.answer_error(request, exc)
    except Exception as exc:
        return errors.answer_error(request, exc)


def middleware(
    guard: ConnectionGuard, allowed_hosts: Iterable[str], tracing: Tracing | None = None
) -> Middleware:
    """``tracing``: the app's tracing owner (None: nothing is traced)."""
    check = origin.checker(allowed_hosts)

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        guard.mark(request, 1)
        try:
            if tracing is not None and traced.wanted(tracing, request):
                answer = functools.partial(_answer, handler=handler, check=check)
                return await traced.around(tracing, request, answer)
            return await _answer(request, handler, check)
        finally:
            guard.mark(request, -1)

    return edge


def setup(
    app: web.Application,
    guard: ConnectionGuard,
    allowed_hosts: Iterable[str],
    tracing: Tracing | None = None,
) -> None:
    """Install the middleware (the app's only one; call before the app starts)."""
    app.middlewares.append(middleware(guard, allowed_hosts, tracing))

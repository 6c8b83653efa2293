"""What every HTTP request of the daemon passes through, outside in, around its handler.

1. the connection guard's busy mark (`wasmgate.runtime.http.connections`): a connection
   whose request is in a handler is never closed to make room for a newcomer;
2. the ``http receive`` span of the inference routes (`wasmgate.runtime.http.traced`),
   outside the error mapping so error answers carry ``traceparent`` too;
3. the error mapping (`wasmgate.runtime.http.errors`): every failure is a V2 error body;
4. the Host allow-list and cross-site refusal (`wasmgate.runtime.http.origin`), inside the
   error mapping so its 403s are V2 error bodies as well.

Each route's handler is wrapped once, when it is added (`routes`), instead of an aiohttp
middleware: a middleware costs every request two coroutine frames of aiohttp's own (the
chain and its ``current_app`` fix-up) besides the middleware's, and a per-request lookup of
whether the route is traced, which is known when the route is added. A catch-all route
(`finish`) answers the paths and methods no route serves, through the same steps.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgspec
from aiohttp import web

from wasmgate.runtime.http import errors, origin, traced
from wasmgate.runtime.http.connections import ConnectionGuard
from wasmgate.runtime.http.forward import LOCAL_ROUTES, from_outside
from wasmgate.runtime.ops.tracing import Tracing

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Check = Callable[[web.Request], None]


class Edge(msgspec.Struct, frozen=True):
    """The steps' owners, set up once per app (`setup`)."""

    guard: ConnectionGuard
    check: Check
    tracing: Tracing | None
    forward: Handler | None = None
    """A data-plane worker's: requests from outside for routes it does not serve itself
    (`wasmgate.runtime.http.forward`) go there."""


EDGE = web.AppKey("edge", Edge)


def setup(
    app: web.Application,
    guard: ConnectionGuard,
    allowed_hosts: Iterable[str],
    tracing: Tracing | None = None,
    forward: Handler | None = None,
) -> None:
    """Set the app's edge up (before any route is added); ``tracing``: the app's tracing
    owner (None: nothing is traced); ``forward``: a worker's way to the control plane."""
    app[EDGE] = Edge(guard, origin.checker(allowed_hosts), tracing, forward)


def wrapped(edge: Edge, handler: Handler, *, traceable: bool) -> Handler:
    """``handler`` behind the edge's steps (``traceable``: an inference route)."""
    guard, check = edge.guard, edge.check
    tracing = edge.tracing if traceable else None

    async def answered(request: web.Request) -> web.StreamResponse:
        try:
            check(request)
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise  # a redirect is an answer, not a failure
            return errors.answer_error(request, exc)
        except Exception as exc:
            return errors.answer_error(request, exc)

    async def at_edge(request: web.Request) -> web.StreamResponse:
        guard.mark(request, 1)
        try:
            if tracing is not None and tracing.wants(request.headers):
                response = await traced.around(tracing, request, answered)
            else:
                response = await answered(request)
        finally:
            guard.mark(request, -1)
        if guard.closing:
            response.force_close()
        return response

    return at_edge


class Routes:
    """``app.router``'s ``add_*``, each handler wrapped in the app's edge; without an edge
    set up (a test's partial app) the handlers are added as they are."""

    def __init__(self, app: web.Application) -> None:
        self._router = app.router
        self._edge = app.get(EDGE)

    def add_get(self, path: str, handler: Handler, **kw: Any) -> web.AbstractRoute:
        return self._router.add_get(path, self._wrap(path, handler), **kw)

    def add_post(self, path: str, handler: Handler, **kw: Any) -> web.AbstractRoute:
        return self._router.add_post(path, self._wrap(path, handler), **kw)

    def add_put(self, path: str, handler: Handler, **kw: Any) -> web.AbstractRoute:
        return self._router.add_put(path, self._wrap(path, handler), **kw)

    def add_delete(self, path: str, handler: Handler, **kw: Any) -> web.AbstractRoute:
        return self._router.add_delete(path, self._wrap(path, handler), **kw)

    def _wrap(self, path: str, handler: Handler) -> Handler:
        if self._edge is None:
            return handler
        forward = self._edge.forward
        if forward is not None and path not in LOCAL_ROUTES:
            handler = _forwarded(handler, forward)
        return wrapped(self._edge, handler, traceable=path in traced.TRACED_ROUTES)


def _forwarded(handler: Handler, forward: Handler) -> Handler:
    """``handler`` on the worker's own socket, ``forward`` for a request from outside."""

    async def either(request: web.Request) -> web.StreamResponse:
        return await (forward if from_outside(request) else handler)(request)

    return either


def routes(app: web.Application) -> Routes:
    return Routes(app)


def finish(app: web.Application) -> None:
    """Add the catch-all route (after every other one: aiohttp tries them in order)."""
    edge = app.get(EDGE)
    if edge is None:
        return
    catch_all = app.router.add_resource("/{unrouted:.*}")
    catch_all.add_route(
        "*", wrapped(edge, functools.partial(_unrouted, catch_all), traceable=False)
    )


async def _unrouted(own: web.AbstractResource, request: web.Request) -> web.StreamResponse:
    """404, or 405 naming the methods of the routes that serve the path."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not own:
            _, methods = await resource.resolve(request)
            allowed |= methods
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, sorted(allowed))
    raise web.HTTPNotFound

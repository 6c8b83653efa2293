"""Management API: list, upload, stage, promote and remove bundles, behind a bearer token.

- ``GET /v1/bundles``: what is serving, staged versions, recent failures.
- ``PUT /v1/bundles[?stage=PERCENT]``: body = a signed ``.wgb``. The signature decides
  what is installed; the token only gates access. 201 when serving, 422 when refused
  (the old version keeps serving), 413 beyond ``limits.max_bundle_bytes``. With ``stage``,
  optional metric gates ``min_requests``, ``max_error_share``, ``max_p99_ratio``,
  ``window_s`` (they tighten the manifest's ``[release]`` table, never loosen it).
- ``POST /v1/bundles/{name}/promote``: a staged version takes all traffic.
- ``POST /v1/bundles/{name}/abort``: drop the staged version (requests on it finish).
- ``DELETE /v1/bundles/{name}``: stop serving it (also after a restart).
- ``PUT /v1/desired``: body = a signed fleet document (the same bytes as on MQTT). 202 when
  accepted (applied in the background: watch ``GET /v1/desired``), 200 when it is the
  document already accepted, 422 when refused (nothing changed; the report says why too).
- ``GET /v1/desired``: the accepted document (its envelope and plan) and the deployment report.

Uploads are written to ``<state_dir>/uploads/`` and deleted once installed or refused; what
a crash left there is deleted at start. At most `MAX_UPLOADS` run at once (429 beyond), so
the directory never holds more than that many bundles. A full disk answers 507.

No ``http.management_token`` configured → every route answers 403 "disabled". A missing or
wrong token → 401 before the body is read, and nothing changes. Tokens are compared with
`hmac.compare_digest`. The token is read per request, so a SIGHUP reload applies at once.
Errors are raised as `wasmgate.runtime.errors` types and answered by the edge's error
mapping (`wasmgate.runtime.http.edge`, `wasmgate.runtime.http.errors`), so statuses and
bodies match the data plane's.
"""

from __future__ import annotations

import errno
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from wasmgate._compat import timeout
from wasmgate.runtime.bundles.registry import describe
from wasmgate.runtime.dataplane.repository import check_bearer
from wasmgate.runtime.errors import (
    BadRequest,
    BundleRejected,
    Busy,
    InsufficientStorage,
    PayloadTooLarge,
)
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.keys import FLEET, LIVE, REGISTRY
from wasmgate.signing.manifest import Release
from wasmgate.typed import convert, plain

log = logging.getLogger("wasmgate.manage")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_UPLOADS = 4
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _check_token(request: web.Request) -> None:
    token = request.app[LIVE].settings.http.management_token
    check_bearer(token, request.headers.get("Authorization"), request.remote)


def guarded(handler: Handler) -> Handler:
    async def wrapper(request: web.Request) -> web.StreamResponse:
        _check_token(request)
        return await handler(request)

    return wrapper


async def list_bundles(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    failures = [vars(e) for e in registry.failures()]
    recent = [vars(e) for e in registry.events]
    return web.json_response({"bundles": registry.status(), "failures": failures, "recent": recent})


def _stage(request: web.Request) -> int:
    raw = request.query.get("stage")
    if raw is None:
        return 100
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise BadRequest(f"stage must be a percentage 1..100, got {raw!r}")
    return int(raw)


_GATES: dict[str, type[int | float]] = {
    "min_requests": int,
    "max_error_share": float,
    "max_p99_ratio": float,
    "window_s": float,
}


def _gates(request: web.Request) -> Release | None:
    """The metric gates given as query parameters (None: none given)."""
    given = {k: request.query[k] for k in _GATES if k in request.query}
    if not given:
        return None
    if "stage" not in request.query:
        raise BadRequest(f"{', '.join(given)}: metric gates apply to a staged install only")
    try:
        # convert, not Release(...): msgspec checks the bounds only there. A refusal
        # (wasmgate.typed.Invalid) says "field: what"; a number that does not parse, why.
        return convert({k: _GATES[k](v) for k, v in given.items()}, Release)
    except ValueError as e:
        raise BadRequest(f"bad metric gate: {e}") from None


async def _receive(request: web.Request, dest: Path, limit: int) -> None:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"bundle of {request.content_length} bytes exceeds limits.max_bundle_bytes ({limit})"
        )
    idle_s = request.app[LIVE].settings.http.body_timeout_s
    size = 0
    with dest.open("xb") as f:
        while True:
            # A big bundle may take long; a stalled one must not hold an upload slot.
            try:
                async with timeout(idle_s):  # not wait_for: wasmgate.runtime.ops.tasks
                    chunk = await request.content.readany()
            except TimeoutError:
                raise web.HTTPRequestTimeout(
                    text=f"upload stalled for http.body_timeout_s ({idle_s:g} s)"
                ) from None
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"bundle exceeds limits.max_bundle_bytes ({limit})")
            f.write(chunk)
    if size == 0:
        raise BadRequest("empty body: PUT the .wgb bundle file as the request body")


def uploads_dir(state_dir: Path) -> Path:
    return state_dir / "uploads"


def sweep_uploads(state_dir: Path) -> int:
    """Delete what interrupted uploads left (call at start, before the API listens)."""
    removed = 0
    folder = uploads_dir(state_dir)
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_file() or entry.is_symlink():
                entry.unlink(missing_ok=True)
                removed += 1
    if removed:
        log.warning("deleted %d stale uploads from %s", removed, folder)
    return removed


async def put_bundle(request: web.Request) -> web.Response:
    stage, gates = _stage(request), _gates(request)
    settings = request.app[LIVE].settings
    uploads = uploads_dir(settings.paths.resolved("state_dir"))
    uploads.mkdir(mode=0o700, parents=True, exist_ok=True)
    if sum(1 for _ in uploads.iterdir()) >= MAX_UPLOADS:
        raise Busy(f"{MAX_UPLOADS} bundle uploads are in progress: retry later")
    dest = uploads / f"{secrets.token_hex(8)}.wgb"
    try:
        await _receive(request, dest, settings.limits.max_bundle_bytes)
        registry = request.app[REGISTRY]
        bundle = await registry.install(dest, source="api", percent=stage, gates=gates)
    except BundleRejected as e:
        raise BundleRejected(f"bundle refused: {e}") from e
    except OSError as e:
        if e.errno not in _DISK_FULL:
            raise
        raise InsufficientStorage(
            f"no space left for the bundle under paths.state_dir ({e.strerror}); "
            "nothing was changed"
        ) from None
    finally:
        dest.unlink(missing_ok=True)
    slot = registry.table.slots().get(bundle.name)
    percent = slot.percent if slot is not None and slot.candidate is bundle else 100
    return web.json_response({"installed": describe(bundle), "percent": percent}, status=201)


async def promote_bundle(request: web.Request) -> web.Response:
    bundle = await request.app[REGISTRY].promote(request.match_info["name"])
    return web.json_response({"promoted": describe(bundle)})


async def abort_bundle(request: web.Request) -> web.Response:
    bundle = await request.app[REGISTRY].abort(request.match_info["name"])
    return web.json_response({"aborted": describe(bundle)})


async def delete_bundle(request: web.Request) -> web.Response:
    bundle = await request.app[REGISTRY].remove(request.match_info["name"])
    return web.json_response({"removed": bundle.name, "version": bundle.version})


async def put_desired(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    limit = request.app[LIVE].settings.fleet.max_document_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"document of {request.content_length} bytes exceeds fleet.max_document_bytes ({limit})"
        )
    body = await request.content.read(limit + 1)
    if len(body) > limit:
        raise PayloadTooLarge(f"document exceeds fleet.max_document_bytes ({limit})")
    if not body:
        raise BadRequest("empty body: PUT the signed fleet document as the request body")
    accepted = await fleet.reconciler.offer(body, "api")
    report = fleet.reporter.document()
    return web.json_response(
        {"accepted": accepted, "report": report}, status=202 if accepted else 200
    )


async def get_desired(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    record = fleet.reconciler.record
    envelope = record.envelope_bytes()
    return web.json_response(
        {
            "serial": record.serial,
            "document": json.loads(envelope) if envelope is not None else None,
            "plan": plain(record.plan),
            "owned": list(record.owned),
            "report": fleet.reporter.document(),
        }
    )


def setup(app: web.Application) -> None:
    """Register the routes; they read ``app[REGISTRY]``, ``app[FLEET]`` and ``app[LIVE]`` per
    request."""
    routes = edge.routes(app)
    routes.add_get("/v1/bundles", guarded(list_bundles))
    routes.add_put("/v1/bundles", guarded(put_bundle))
    routes.add_post("/v1/bundles/{name}/promote", guarded(promote_bundle))
    routes.add_post("/v1/bundles/{name}/abort", guarded(abort_bundle))
    routes.add_delete("/v1/bundles/{name}", guarded(delete_bundle))
    routes.add_put("/v1/desired", guarded(put_desired))
    routes.add_get("/v1/desired", guarded(get_desired))

    async def sweep(app: web.Application) -> None:
        # A worker receives no upload: what it would find is the supervisor's, in progress.
        if app[edge.EDGE].forward is None:
            sweep_uploads(app[LIVE].settings.paths.resolved("state_dir"))

    app.on_startup.append(sweep)

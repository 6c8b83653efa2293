"""Helpers the HTTP routes share: deadlines, latency headers, request metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from wasmgate._compat import timeout
from wasmgate.runtime.errors import BadRequest, DaemonError, PayloadTooLarge
from wasmgate.runtime.http.keys import SETTINGS
from wasmgate.runtime.ops.config import HttpSettings
from wasmgate.runtime.ops.metrics import Kind, Metrics
from wasmgate.runtime.serving import timeouts
from wasmgate.runtime.serving.api import Source

TIMEOUT_HEADER = "X-Wasmgate-Timeout-Ms"
"""Optional request header: answer within this many milliseconds or get 504."""
SOURCE_HEADER = "X-Wasmgate-Source"
VERSION_HEADER = "X-Wasmgate-Version"
FALLBACK_HEADER = "X-Wasmgate-Fallback-Reason"
CANARY_KEY_HEADER = "X-Wasmgate-Canary-Key"
"""Request header: the key whose hash picks the side of a staged release (else X-Request-Id)."""
MAX_KEY_CHARS = 256


def canary_key(request: web.Request) -> str | None:
    """The request's canary key: ``X-Wasmgate-Canary-Key``, else ``X-Request-Id``, else None."""
    key = request.headers.get(CANARY_KEY_HEADER) or request.headers.get("X-Request-Id")
    if key is not None and len(key) > MAX_KEY_CHARS:
        raise BadRequest(f"{CANARY_KEY_HEADER} / X-Request-Id: at most {MAX_KEY_CHARS} characters")
    return key or None


def pinned_version(request: web.Request) -> str | None:
    """``X-Wasmgate-Version: N`` on a request pins it to version N (serving or staged)."""
    version = request.headers.get(VERSION_HEADER)
    if version is not None and not version.strip().isdigit():
        raise BadRequest(f"{VERSION_HEADER} must be a version number, got {version!r}")
    return version.strip() if version is not None else None


@dataclass
class InferOutcome:
    """What one V2 inference produced (a model's outputs, or an adapter run as a V2 model)."""

    outputs: dict[str, np.ndarray[Any, Any]]
    source: Source
    version: int
    timings: dict[str, float]
    fallback_reason: str | None


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


def parameter_deadline(parameters: Mapping[str, Any] | None) -> float | None:
    """A monotonic deadline from the V2 ``timeout`` parameter (microseconds, what
    tritonclient's ``timeout=`` sends over HTTP and gRPC alike), else None."""
    timeout = (parameters or {}).get("timeout")
    if timeout is None:
        return None
    return timeouts.after(timeouts.budget_s(timeout, "parameter 'timeout'", "microseconds", 1e-6))


def deadline_of(request: web.Request, parameters: Mapping[str, Any] | None = None) -> float | None:
    """A monotonic deadline from ``X-Wasmgate-Timeout-Ms`` or the V2 ``timeout`` parameter;
    the sooner wins."""
    header = request.headers.get(TIMEOUT_HEADER)
    return timeouts.earliest(
        timeouts.after(None if header is None else timeouts.budget_s(header, TIMEOUT_HEADER)),
        parameter_deadline(parameters),
    )


def answer_headers(
    source: Source,
    version: int,
    timings: Mapping[str, float],
    total: float,
    fallback_reason: str | None = None,
) -> dict[str, str]:
    """Source, version and a ``Server-Timing`` latency breakdown (milliseconds)."""
    parts = [f"{stage};dur={seconds * 1e3:.3f}" for stage, seconds in timings.items()]
    parts.append(f"total;dur={total * 1e3:.3f}")
    headers = {
        SOURCE_HEADER: source,
        VERSION_HEADER: str(version),
        "Server-Timing": ", ".join(parts),
    }
    if fallback_reason:
        headers[FALLBACK_HEADER] = fallback_reason.replace("\r", " ").replace("\n", " ")
    return headers


class Observation:
    """Times one request and reports it to the daemon's `Metrics` (if there are any); the
    gRPC service observes its requests with it too."""

    def __init__(self, metrics: Metrics | None, kind: Kind, name: str) -> None:
        self._metrics = metrics
        self.kind: Kind = kind
        self.name = name
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def ok(self, source: Source, timings: Mapping[str, float]) -> None:
        if self._metrics is not None:
            self._metrics.observe_request(
                self.kind, self.name, source, timings, seconds=self.elapsed()
            )

    def failed(self, exc: BaseException) -> None:
        if self._metrics is None:
            return
        if isinstance(exc, DaemonError):
            error = type(exc).__name__
        elif isinstance(exc, web.HTTPRequestEntityTooLarge):
            error = "PayloadTooLarge"
        elif isinstance(exc, web.HTTPException):
            error = f"HTTP{exc.status}"
        else:
            error = "InternalError"
        self._metrics.observe_request(self.kind, self.name, None, {}, error, seconds=self.elapsed())

"""`CloudFallback`: the KServe V2 (Open Inference Protocol) client the service falls back to.

Satisfies `wasmgate.runtime.cloud.policy.CloudClient`; the per-bundle policy (which
causes, whether the payload may leave the gateway) is applied there, not here.

- Adapters (``cloud.protocol = "v2"``, the default): ``POST {url}/v2/models/{adapter}/infer``
  with one BYTES input ``payload`` (binary tensor extension, so any bytes travel as-is;
  input parameter ``content_type``, request parameter ``fallback_reason``), answer = the
  BYTES output ``answer`` (or the only output). Works with any V2 server and with another
  wasmgate. ``"raw"``: ``POST {url}/v1/adapters/{adapter}`` with the payload as the body,
  header ``X-Wasmgate-Fallback-Reason``; answer = the response body.
- Models: ``POST {url}/v2/models/{model}/infer`` with JSON tensors (binary for BF16 and
  BYTES), answers decoded with the same codec as our own HTTP server.
- Bearer token, CA bundle, per-request timeout, at most ``max_concurrent`` requests in
  flight (a semaphore; waiting counts against the timeout), and a `CircuitBreaker`.
  Every failure raises `CloudUnavailable` naming the cause.
- The request's W3C trace context (``traceparent``, ``tracestate``) goes with every call.
- Redirects are never followed (a 3xx is a failure: following one would re-POST the payload
  to wherever it points). An answer larger than ``max_answer_bytes`` is refused while it is
  read; an answer above 256 KiB is decoded in a worker thread, off the event loop.
The V2 request and response bodies are written and read by `v2wire.py`.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from wasmgate._compat import Self, timeout
from wasmgate.runtime.cloud.breaker import CircuitBreaker
from wasmgate.runtime.cloud.breaker_shared import SharedCell
from wasmgate.runtime.cloud.v2wire import (
    HEADER_LENGTH,
    Array,
    adapter_answer,
    adapter_request,
    decode_v2_response,
    encode_v2_request,
)
from wasmgate.runtime.errors import BadRequest, CloudUnavailable, ConfigError
from wasmgate.runtime.ops.config import CloudSettings
from wasmgate.runtime.ops.tracing import inject

_READ_CHUNK = 64 * 1024
_DECODE_INLINE_BYTES = 256 * 1024
"""Answers above this are decoded in a worker thread, not on the event loop."""


class CloudFallback:
    """Owns one aiohttp session: ``async with CloudFallback(settings.cloud) as cloud: ...``."""

    def __init__(
        self,
        settings: CloudSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        shared: Path | None = None,
    ) -> None:
        """``clock``: the breaker's (a test moves it instead of sleeping ``reset_s``);
        ``shared``: the gateway's breaker file, when its processes share one breaker."""
        if settings.url is None:
            raise ConfigError("cloud.url is not set: cloud fallback is off")
        self._settings = settings
        self._base = settings.url.rstrip("/")
        self._cell = None if shared is None else SharedCell(shared, settings.breaker_window)
        self.breaker = CircuitBreaker(
            failures=settings.breaker_failures,
            reset_s=settings.breaker_reset_s,
            window=settings.breaker_window,
            failure_rate=settings.breaker_failure_rate,
            probes=settings.breaker_probes,
            clock=clock,
            cell=self._cell,
        )
        self._slots = asyncio.Semaphore(settings.max_concurrent)
        self._session: aiohttp.ClientSession | None = None
        self.requests = 0
        self.failures = 0
        self.in_flight = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        """When ``last_error`` happened (POSIX time), so the status page can date it."""

    async def __aenter__(self) -> Self:
        # A context of our own, never aiohttp's default (`wasmgate.runtime.http._aiohttp_private`
        # leaves that one without roots); loading a CA file is blocking I/O: off the loop.
        cafile = None if self._settings.tls_ca is None else str(self._settings.tls_ca)
        ctx = await asyncio.to_thread(ssl.create_default_context, cafile=cafile)
        headers = {}
        if self._settings.token is not None:
            headers["Authorization"] = f"Bearer {self._settings.token}"
        self._session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(ssl=ctx, limit=self._settings.max_concurrent),
            timeout=aiohttp.ClientTimeout(total=self._settings.timeout_s),
        )
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._cell is not None:
            self._cell.close()

    @property
    def state(self) -> dict[str, Any]:
        """Breaker and traffic facts for ``/metrics`` and the status page."""
        snap = asdict(self.breaker.snapshot())
        snap["state"] = str(snap["state"])
        return {
            "url": self._base,
            "breaker": snap,
            "requests": self.requests,
            "failures": self.failures,
            "in_flight": self.in_flight,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        }

    async def infer_adapter(
        self, adapter: str, payload: bytes, content_type: str | None, reason: str
    ) -> bytes:
        if self._settings.protocol == "raw":
            headers = {"X-Wasmgate-Fallback-Reason": reason}
            if content_type is not None:
                headers["Content-Type"] = content_type
            body, _ = await self._post(f"/v1/adapters/{adapter}", payload, headers)
            return body
        inputs, params = adapter_request(payload, content_type)
        outputs = await self._infer(
            adapter, inputs, ["answer"], {"fallback_reason": reason}, params
        )
        answer = adapter_answer(outputs)
        if answer is None:
            raise CloudUnavailable(f"cloud {self._base}: answer has no single 'answer' element")
        return answer

    async def post_json(self, path: str, body: bytes) -> None:
        """POST a JSON document to ``{url}{path}`` (hard-example samples); a 2xx or raise."""
        await self._post(path, body, {"Content-Type": "application/json"})

    async def infer_model(
        self, model: str, inputs: Mapping[str, Array], outputs: Sequence[str] | None
    ) -> dict[str, Array]:
        return await self._infer(model, inputs, outputs, None, None)

    async def _infer(
        self,
        model: str,
        inputs: Mapping[str, Array],
        outputs: Sequence[str] | None,
        params: Mapping[str, Any] | None,
        input_params: Mapping[str, Mapping[str, Any]] | None,
    ) -> dict[str, Array]:
        body, header_length = encode_v2_request(
            inputs,
            outputs=outputs,
            binary_outputs=True,
            parameters=params,
            input_parameters=input_params,
        )
        headers = {"Content-Type": "application/json"}
        if header_length is not None:
            headers = {
                "Content-Type": "application/octet-stream",
                HEADER_LENGTH: str(header_length),
            }
        answer, answer_headers = await self._post(f"/v2/models/{model}/infer", body, headers)
        try:
            length = answer_headers.get(HEADER_LENGTH)
            head = int(length) if length is not None else None
            if len(answer) <= _DECODE_INLINE_BYTES:
                return decode_v2_response(answer, head)
            return await asyncio.to_thread(decode_v2_response, answer, head)  # off the loop
        except (BadRequest, ValueError) as e:
            self.breaker.failure()
            raise self._fail(f"answer is not a V2 inference response: {e}") from e

    async def _post(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[bytes, Mapping[str, str]]:
        """POST through the semaphore and the breaker; returns body and headers of a 2xx."""
        if self._session is None:
            raise RuntimeError("use `async with CloudFallback(...)`")
        if not self.breaker.allow():
            snap = self.breaker.snapshot()
            raise CloudUnavailable(
                f"cloud {self._base}: circuit breaker open (last error: {self.last_error}); "
                f"next probe in {snap.retry_in_s:.1f}s"
            )
        self.requests += 1
        started = time.monotonic()
        traced = dict(headers)
        inject(traced)  # the request's trace context (W3C traceparent) goes on to the cloud
        try:
            async with timeout(self._settings.timeout_s), self._slots:
                self.in_flight += 1
                try:
                    return await self._send(self._session, path, body, traced)
                finally:
                    self.in_flight -= 1
        except (TimeoutError, asyncio.TimeoutError) as e:  # aiohttp's: not TimeoutError on 3.10
            self.breaker.failure()
            waited = time.monotonic() - started
            raise self._fail(
                f"no answer within {self._settings.timeout_s:g}s ({waited:.2f}s)"
            ) from e
        except aiohttp.ClientConnectionError as e:
            self.breaker.failure()
            raise self._fail(f"cannot connect: {_connection_cause(e)}") from e
        except asyncio.CancelledError:
            self.breaker.release()
            raise

    async def _send(
        self, session: aiohttp.ClientSession, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[bytes, Mapping[str, str]]:
        # Never follow a redirect: the payload would be POSTed again to wherever it points.
        url = self._base + path
        async with session.post(url, data=body, headers=headers, allow_redirects=False) as resp:
            if 300 <= resp.status < 400:
                self.breaker.failure()
                where = resp.headers.get("Location", "?")[:200]
                raise self._fail(f"HTTP {resp.status} redirect to {where} refused (not followed)")
            data = await self._read_capped(resp, path)
            if resp.status < 400:
                self.breaker.success()
                return data, resp.headers
            text = data[:300].decode(errors="replace")
            refused = resp.status < 500 and resp.status != 429
            if refused:
                self.breaker.success()  # the endpoint is up; the request was refused
            else:
                self.breaker.failure()
            raise self._fail(f"HTTP {resp.status} from {path}: {text}", refused=refused)

    async def _read_capped(self, resp: aiohttp.ClientResponse, path: str) -> bytes:
        """The body, refused once it exceeds ``cloud.max_answer_bytes`` (declared or read)."""
        cap = self._settings.max_answer_bytes
        declared = resp.content_length
        size = declared if declared is not None and declared > cap else None
        buf = bytearray()
        if size is None:
            async for chunk in resp.content.iter_chunked(_READ_CHUNK):
                buf += chunk
                if len(buf) > cap:
                    size = len(buf)
                    break
        if size is not None:
            self.breaker.failure()
            raise self._fail(
                f"answer from {path} exceeds cloud.max_answer_bytes ({cap}): "
                f"{'declared' if declared else 'read'} {size} bytes; refused"
            )
        return bytes(buf)

    def _fail(self, cause: str, *, refused: bool = False) -> CloudUnavailable:
        self.failures += 1
        self.last_error, self.last_error_at = cause, time.time()
        return CloudUnavailable(f"cloud {self._base}: {cause}", refused=refused)


def _connection_cause(e: aiohttp.ClientConnectionError) -> str:
    if isinstance(e, aiohttp.ClientSSLError):
        # Its errno is OpenSSL's (1: "Operation not permitted"); its text says what failed.
        return f"TLS with {e.host}:{e.port} failed: {e.os_error}"
    if isinstance(e, aiohttp.ClientConnectorError):
        err = e.os_error
        # asyncio's "Connect call failed (host, port)" hides the reason; errno has it.
        return f"{os.strerror(err.errno)} ({e.host}:{e.port})" if err.errno else str(err)
    return str(e) or type(e).__name__

"""Applying a bundle's cloud fallback policy: when to ask the cloud, and what to answer.

The cloud client (`wasmgate.runtime.cloud.client.CloudFallback`) is anything with the
`CloudClient` shape. Rules:
- a flag of the manifest's ``fallback`` (already and-ed with ``allowed`` by the loader)
  decides per cause: ``on_error`` (adapter error, trap, backend failure), ``on_busy``,
  ``on_deadline``, ``on_missing_model``, ``on_adapter_request`` (the guest called
  ``request_fallback``);
- a request goes to the cloud only when ``send_payload`` allows its payload to leave the
  gateway: the raw device payload of an adapter request, the input tensors of a direct
  model request alike;
- when local and cloud both fail: `FallbackFailed` naming both causes; when the guest asked
  for fallback and the cloud fails, the local answer is served (it exists, it is just weak);
- when the cloud is unreachable and the bundle allows deferral (``fallback.defer``), an
  adapter request without a local answer is kept and sent later instead
  (`wasmgate.runtime.field.deferral`); a refusal by a reachable cloud is never deferred.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from opentelemetry.trace import SpanKind

from wasmgate._compat import timeout
from wasmgate.runtime.errors import (
    Busy,
    CloudUnavailable,
    DaemonError,
    DeadlineExceeded,
    FallbackFailed,
    InferenceFailed,
)
from wasmgate.runtime.field.deferral import Deferral
from wasmgate.runtime.field.store import StoreError
from wasmgate.runtime.ops.logs import Throttled
from wasmgate.runtime.ops.throttle_shared import SharedThrottle
from wasmgate.runtime.served.api import AdapterAnswer, AdapterRequest, ModelAnswer, ModelRequest
from wasmgate.runtime.served.loaded import FallbackPolicy, LoadedBundle
from wasmgate.sandbox.spans import Attributes, span

log = logging.getLogger("wasmgate.fallback")
T = TypeVar("T")


class CloudClient(Protocol):
    """The calls the service makes on the cloud fallback client."""

    async def infer_adapter(
        self, adapter: str, payload: bytes, content_type: str | None, reason: str
    ) -> bytes: ...

    async def infer_model(
        self,
        model: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        outputs: Sequence[str] | None,
    ) -> Mapping[str, npt.NDArray[Any]]: ...


class Deferrer(Protocol):
    """Keeps a request for the cloud (`wasmgate.runtime.field.deferral.StoredDeferrals`)."""

    async def defer(self, what: Deferral, req: AdapterRequest, reason: str) -> AdapterAnswer:
        """The immediate answer of a kept request; StoreError when it cannot be kept."""
        ...


class FallbackRunner:
    """Decides and performs cloud fallback for the service."""

    def __init__(
        self,
        cloud: CloudClient | None,
        observe: Callable[[str, str, bool], None] | None = None,
        deferrer: Deferrer | None = None,
        log_limits: SharedThrottle | None = None,
    ) -> None:
        """``log_limits``: the gateway's, when several processes serve (a worker)."""
        self._cloud = cloud
        self._observe = observe
        self._deferrer = deferrer
        # Per adapter, once a minute: while the cloud is away every request fails the same
        # way; once a minute for the whole gateway when its workers share the decision.
        self._cloud_failed = Throttled(log)
        if log_limits is not None:
            self._cloud_failed.share(log_limits)

    def _note(self, name: str, error: DaemonError | None, asked: bool, ok: bool) -> None:
        if self._observe is not None:
            self._observe(name, _kind(error, asked), ok)

    def enabled(self, flag: bool) -> bool:
        return self._cloud is not None and flag

    def wants(self, policy: FallbackPolicy, error: DaemonError) -> bool:
        """True when ``error`` (a local failure) should go to the cloud under ``policy``."""
        if isinstance(error, Busy):
            return self.enabled(policy.on_busy)
        if isinstance(error, DeadlineExceeded):
            return self.enabled(policy.on_deadline)
        if isinstance(error, InferenceFailed):
            return self.enabled(policy.on_error)
        return False

    async def adapter(  # noqa: PLR0917 - one call site, all positional context
        self,
        bundle: LoadedBundle,
        req: AdapterRequest,
        reason: str,
        deadline: float | None,
        timings: dict[str, float],
        local_error: DaemonError | None = None,
        local_answer: AdapterAnswer | None = None,
    ) -> AdapterAnswer:
        """Answer ``req`` from the cloud; see the module rules for failures."""
        cloud = self._cloud
        if cloud is None or not bundle.fallback.send_payload:
            if local_answer is not None:
                return local_answer
            if local_error is not None:
                raise local_error
            raise InferenceFailed(f"{req.adapter}: {reason} (cloud fallback not available)")
        start = time.monotonic()
        try:
            with _span(req.adapter, bundle, reason):
                body = await _within(
                    cloud.infer_adapter(req.adapter, req.payload, req.content_type, reason),
                    deadline,
                )
        except Exception as e:
            timings["fallback"] = time.monotonic() - start
            self._note(req.adapter, local_error, local_answer is not None, ok=False)
            if local_answer is not None:
                self._cloud_failed.warning(
                    f"cloud {req.adapter}",
                    "cloud fallback failed, serving the local answer",
                    {"e": str(e)},
                )
                return local_answer
            deferred = await self._defer(bundle, req, reason, e)
            if deferred is not None:
                return deferred
            raise FallbackFailed(f"local: {reason}; cloud: {_describe(e)}") from e
        timings["fallback"] = time.monotonic() - start
        self._note(req.adapter, local_error, local_answer is not None, ok=True)
        log.info("answered by the cloud", extra={"adapter": req.adapter, "reason": reason})
        return AdapterAnswer(
            body=body,
            content_type=bundle.answer_content_type,
            source="cloud",
            version=bundle.version,
            timings=timings,
            fallback_reason=reason,
        )

    async def _defer(
        self, bundle: LoadedBundle, req: AdapterRequest, reason: str, error: Exception
    ) -> AdapterAnswer | None:
        """The deferred answer when ``bundle`` allows it and the cloud is unreachable."""
        unreachable = isinstance(error, DeadlineExceeded) or (
            isinstance(error, CloudUnavailable) and not error.refused
        )
        if self._deferrer is None or not bundle.fallback.defer or not unreachable:
            return None
        what = Deferral(
            req.adapter, bundle.mqtt_name or req.adapter, bundle.version,
            bundle.answer_content_type,
        )  # fmt: skip
        try:
            answer = await self._deferrer.defer(what, req, f"{reason}; cloud: {_describe(error)}")
        except StoreError as e:
            log.warning("could not defer a request of %s: %s", req.adapter, e)
            return None
        log.info("deferred until the cloud is back", extra={"adapter": req.adapter})
        return answer

    async def model(
        self,
        bundle: LoadedBundle,
        req: ModelRequest,
        reason: str,
        timings: dict[str, float],
        local_error: DaemonError | None = None,
    ) -> ModelAnswer:
        """Answer a direct model request from the cloud (its input tensors are the payload)."""
        cloud = self._cloud
        if cloud is None or not bundle.fallback.send_payload:
            raise local_error or InferenceFailed(
                f"{req.model}: {reason} (cloud fallback not available)"
            )
        start = time.monotonic()
        try:
            with _span(req.model, bundle, reason):
                outputs = await _within(
                    cloud.infer_model(req.model, req.inputs, req.outputs), req.deadline
                )
        except Exception as e:
            timings["fallback"] = time.monotonic() - start
            self._note(req.model, local_error, asked=False, ok=False)
            raise FallbackFailed(f"local: {reason}; cloud: {_describe(e)}") from e
        timings["fallback"] = time.monotonic() - start
        self._note(req.model, local_error, asked=False, ok=True)
        return ModelAnswer(
            outputs={k: np.asarray(v) for k, v in outputs.items()},
            source="cloud",
            version=bundle.version,
            timings=timings,
        )


def _span(name: str, bundle: LoadedBundle, reason: str) -> AbstractContextManager[object]:
    """The ``fallback`` span: the cloud call, whose request carries its trace context."""

    def attributes() -> Attributes:  # computed only when the request is traced
        return {
            "wasmgate.model": name,
            "wasmgate.version": bundle.version,
            "wasmgate.fallback.reason": reason,
        }

    return span("fallback", attributes, kind=SpanKind.CLIENT)


async def _within(call: Coroutine[Any, Any, T], deadline: float | None) -> T:
    if deadline is None:
        return await call
    left = deadline - time.monotonic()
    if left <= 0:
        call.close()
        raise DeadlineExceeded("no time left for the cloud")
    try:
        async with timeout(left):  # not wait_for: see wasmgate.runtime.ops.tasks
            return await call
    except TimeoutError:
        raise DeadlineExceeded("the cloud did not answer before the deadline") from None


def _kind(error: DaemonError | None, asked: bool) -> str:
    if asked:
        return "adapter_request"
    if isinstance(error, Busy):
        return "busy"
    if isinstance(error, DeadlineExceeded):
        return "deadline"
    return "missing_model" if error is None else "error"


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__

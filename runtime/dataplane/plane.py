"""`DataPlane` and its `Call`: from a decoded request to its outcome, for every transport.

A transport writes::

    async with plane.v2(transport, name, version) as call:      # resolves the model
        request = decode(...)                                     # its own wire format
        outcome = await call.infer(request, Route(...))           # checks, deadline, dispatch
        answer = encode(outcome)
    # left normally: observed as answered; by an exception: observed as failed, re-raised

(``plane.adapter(transport, name)`` for a raw adapter request, ``call.run_adapter``.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import msgspec

from wasmgate._compat import Self
from wasmgate.runtime.dataplane.adapters import InferOutcome, infer_adapter
from wasmgate.runtime.dataplane.line import Lines
from wasmgate.runtime.dataplane.observe import Observation, Transport
from wasmgate.runtime.errors import BadRequest, Busy, NotFound
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.protocol.codec import InferRequest
from wasmgate.runtime.served import timeouts
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelInfo,
    ModelRequest,
    Namespace,
    ServiceAPI,
)

T = TypeVar("T")
_Line = tuple["Lines | None", str]
MAX_KEY_CHARS = 256
"""Longest canary key a request may send, on every transport."""
OFFLOAD_BYTES = 256 * 1024
"""Bodies (or outputs) larger than this are decoded (encoded) in a worker thread."""


async def off_loop(size: int, fn: Callable[[], T]) -> T:
    """``fn()``, in a worker thread when ``size`` (bytes) is over `OFFLOAD_BYTES`."""
    # Decoding or encoding megabytes of JSON takes long enough to stall every other client.
    return await asyncio.to_thread(fn) if size > OFFLOAD_BYTES else fn()


class Route(msgspec.Struct, frozen=True):
    """What a transport read off a request besides its tensors or payload."""

    deadline: float | None = None
    """The transport's own deadline (header, gRPC deadline, MQTT expiry), monotonic."""
    key: str | None = None
    key_field: str = "canary key"
    """How the transport names the key, for the error message."""
    pin: str | None = None
    pin_field: str = "version"
    meta: Mapping[str, str] = msgspec.field(default_factory=dict)
    patience_s: float = 0.0
    """How long a `Busy` refusal is retried (MQTT: the broker holds the backlog)."""
    on_retry: Callable[[], None] | None = None


def checked_key(route: Route) -> str | None:
    key = route.key
    if key is not None and len(key) > MAX_KEY_CHARS:
        raise BadRequest(f"{route.key_field}: at most {MAX_KEY_CHARS} characters")
    return key or None


def checked_pin(route: Route) -> str | None:
    """``version: N`` pins a request to version N (serving or staged)."""
    pin = route.pin
    if pin is None:
        return None
    if not pin.strip().isdigit():
        raise BadRequest(f"{route.pin_field} must be a version number, got {pin[:40]!r}")
    return pin.strip()


def parameter_deadline(parameters: Mapping[str, Any] | None) -> float | None:
    """A monotonic deadline from the V2 ``timeout`` parameter (microseconds, what
    tritonclient's ``timeout=`` sends over HTTP and gRPC alike), else None."""
    timeout = (parameters or {}).get("timeout")
    if timeout is None:
        return None
    return timeouts.after(timeouts.budget_s(timeout, "parameter 'timeout'", "microseconds", 1e-6))


@dataclass
class Call:
    """One request in the data plane; ``async with`` observes it (see the module doc)."""

    service: ServiceAPI
    observation: Observation
    info: ModelInfo | None
    """The V2 model or adapter the request names (None for a raw adapter request)."""
    url_version: str | None = None
    outcome: InferOutcome | AdapterAnswer | None = None
    lines: _Line = (None, "")
    """The plane's lines of patient requests, and this request's line in them."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if e is not None:
            self.observation.failed(e)
        elif self.outcome is not None:
            self.observation.ok(self.outcome.source, self.outcome.timings)

    async def infer(self, request: InferRequest, route: Route) -> InferOutcome:
        """A V2 inference: the model's outputs, or the adapter run once per element."""
        info = self.info
        assert info is not None, "Call.infer on a raw adapter call"  # noqa: S101 - a bug
        key = checked_key(route)
        pin = self.url_version or checked_pin(route)
        deadline = timeouts.earliest(route.deadline, parameter_deadline(request.parameters))
        if info.kind == "adapter":
            outcome = await _patiently(
                lambda: infer_adapter(
                    self.service, info, request, deadline, meta=route.meta, key=key, version=pin
                ),
                route,
                deadline,
                self.lines,
            )
        else:
            req = ModelRequest(info.name, request.inputs, request.output_names, pin, deadline, key)
            answer = await _patiently(
                lambda: self.service.infer_model(req), route, deadline, self.lines
            )
            outcome = InferOutcome(
                dict(answer.outputs), answer.source, answer.version, answer.timings, None
            )
        self.outcome = outcome
        return outcome

    async def run_adapter(
        self, payload: bytes, content_type: str | None, route: Route, namespace: Namespace
    ) -> AdapterAnswer:
        """A raw adapter request: one payload in, the adapter's answer out."""
        name = self.observation.name
        req = AdapterRequest(
            name, payload, content_type, route.meta, route.deadline,
            checked_key(route), checked_pin(route), namespace,
        )  # fmt: skip
        answer = await _patiently(
            lambda: self.service.run_adapter(req), route, route.deadline, self.lines
        )
        self.outcome = answer
        return answer


async def _patiently(
    call: Callable[[], Awaitable[T]], route: Route, deadline: float | None, line: _Line
) -> T:
    """``call()``; a `Busy` refusal waits in the name's line (`wasmgate.runtime.dataplane.line`)
    for up to ``route.patience_s`` (or the deadline) and tries again in turn.

    An MQTT backlog arrives all at once (a restart, a burst); the broker holds what is beyond
    Receive Maximum, so a short wait here beats answering 429 to a device."""
    lines, key = line
    if route.patience_s <= 0 or lines is None:
        return await call()
    give_up = time.monotonic() + route.patience_s
    if deadline is not None:
        give_up = min(give_up, deadline)
    freed = True
    try:
        return await lines.patiently(key, call, give_up, route.on_retry)
    except Busy:
        freed = False  # refused for good: it never held a slot
        raise
    finally:
        if freed:  # it ran (or was cancelled): the head of the line may try now
            lines.freed(key)


class DataPlane:
    """Opens calls on one service for the transports (stateless: one per transport is fine)."""

    def __init__(self, service: ServiceAPI, metrics: Metrics | None) -> None:
        self.service = service
        self._metrics = metrics
        self._lines = Lines()

    def v2(self, transport: Transport, name: str, version: str | None) -> Call:
        """A V2 call on model or adapter ``name`` (``version``: named by its address).

        An unknown name is observed (as ``_unknown_``, like every transport) and raised."""
        try:
            info = self.service.model_info(name, version)
        except NotFound as e:
            Observation(self._metrics, transport, "model", name).failed(e)
            raise
        observation = Observation(self._metrics, transport, info.kind, info.name)
        return Call(self.service, observation, info, version, lines=(self._lines, f"v2:{name}"))

    def adapter(self, transport: Transport, name: str) -> Call:
        """A raw adapter call (a device payload, not tensors)."""
        observation = Observation(self._metrics, transport, "adapter", name)
        return Call(self.service, observation, None, lines=(self._lines, f"adapter:{name}"))

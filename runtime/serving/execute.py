"""Local execution on the worker pool: one adapter run in the sandbox, one direct model run
(either may run inline on the event loop instead: `wasmgate.runtime.serving.guest_run`,
`wasmgate.runtime.serving.inline`).

Both are awaited with the request's remaining time (adapters plus a short grace, because
the sandbox's own epoch deadline normally fires first and says more precisely what
happened). The request's deadline travels with the work (sandbox epoch deadline, wasi-nn
``compute``, ``ModelHandle.infer``), so the native run stops at it where the backend can.
When the client's answer is `DeadlineExceeded` but the work is still running (a LiteRT
invoke, a guest finishing up), ``hold`` keeps the request's admission slot taken until the
work really ends: a slot is never counted free while native work for it runs.
Sandbox and backend exceptions become `wasmgate.runtime.errors` types here, once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

import numpy.typing as npt

from wasmgate._compat import timeout
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.errors import (
    BackendError,
    BadRequest,
    DaemonError,
    DeadlineExceeded,
    InferenceFailed,
)
from wasmgate.runtime.served.api import AdapterAnswer, AdapterRequest
from wasmgate.runtime.served.loaded import (
    GuestOutcome,
    LoadedBundle,
    ServedModel,
)
from wasmgate.runtime.serving.guest_run import inline_run, may_inline, remaining, run_guest
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.sandbox.errors import GuestDeadlineExceeded, GuestOutputTooLarge, SandboxError
from wasmgate.sandbox.models import ModelHandle

T = TypeVar("T")

log = logging.getLogger("wasmgate.service")

# The sandbox's deadline (epoch interruption) fires at the request deadline; we wait this much
# longer for its precise verdict before answering DeadlineExceeded ourselves.
_GRACE_S = 0.25
_MAX_ERROR_CHARS = 512

Hold = Callable[["asyncio.Future[Any]"], None]
"""Keeps the caller's admission slot taken until the given (still running) work is done."""


async def execute_adapter(
    pool: Executor,
    bundle: LoadedBundle,
    req: AdapterRequest,
    deadline: float,
    timings: dict[str, float],
    *,
    hold: Hold,
    policy: InlinePolicy | None = None,
    pool_busy: bool = True,
    crowded: bool = False,
    calls: Callable[[Mapping[str, int]], None] | None = None,
) -> AdapterAnswer:
    """Run the adapter once; raises BadRequest (status 1) or InferenceFailed (2, traps).

    Inline on the loop when ``policy`` measured the adapter tiny (``crowded``: other
    requests are in flight; see `wasmgate.runtime.serving.guest_run`), else on the pool.
    ``calls`` gets the models the run called (``GuestOutcome.model_calls``), on the loop."""
    adapter = bundle.adapter
    if adapter is None:
        raise InferenceFailed(f"bundle {bundle.name!r} has no adapter")
    key = f"adapter:{req.adapter}"
    with _local_failures(req.adapter):
        try:
            result = None
            if policy is not None and may_inline(bundle, policy, req, pool_busy, crowded):
                result = inline_run(adapter, bundle, req, deadline, policy)
            inline = result is not None
            if result is None:
                left = remaining(deadline)
                work = pool.submit(run_guest, adapter, bundle, req, bundle.guest_limits(left))
                result = await _wait(work, left + _GRACE_S, hold)
        except TimeoutError:
            raise DeadlineExceeded(f"{req.adapter}: deadline exceeded") from None
        except GuestDeadlineExceeded as e:
            raise DeadlineExceeded(f"{req.adapter}: deadline exceeded in the sandbox") from e
        except GuestOutputTooLarge as e:
            raise InferenceFailed(f"{req.adapter}: answer too large: {e}") from e
        except SandboxError as e:
            raise InferenceFailed(f"{req.adapter}: {e}") from e
    _account(result, key, inline, policy, calls)
    for line in result.logs:
        log.debug("guest: %s", line, extra={"adapter": req.adapter})
    timings["inference"] = result.infer_s
    timings["sandbox"] = max(0.0, result.instantiate_s + result.run_s - result.infer_s)
    return _answer(bundle, req, result, timings)


def _account(
    result: GuestOutcome,
    key: str,
    inline: bool,
    policy: InlinePolicy | None,
    calls: Callable[[Mapping[str, int]], None] | None,
) -> None:
    """What a finished run tells the inline policy and the model-call counts."""
    if policy is not None:
        policy.record(key, result.instantiate_s + result.run_s, inline=inline)
    if calls is not None and result.model_calls:
        calls(result.model_calls)


def _answer(
    bundle: LoadedBundle, req: AdapterRequest, result: GuestOutcome, timings: dict[str, float]
) -> AdapterAnswer:
    if result.status == 1:
        raise BadRequest(f"{req.adapter}: {_message(result.output)}")
    if result.status != 0:
        raise InferenceFailed(f"{req.adapter}: adapter error: {_message(result.output)}")
    return AdapterAnswer(
        body=result.output,
        content_type=bundle.answer_content_type,
        source="local",
        version=bundle.version,
        timings=timings,
        events=list(result.events),
        fallback_reason=result.fallback_reason,
    )


def _message(output: bytes) -> str:
    text = output.decode("utf-8", errors="replace").strip()
    return text[:_MAX_ERROR_CHARS] or "(no message)"


class _local_failures:  # noqa: N801 - used as a function: ``with _local_failures(what):``
    """The one translation of a local run's failure, for adapters and models alike.

    Our own errors keep their meaning (a closing batcher stays `NotReady`, a client mistake
    stays `BadRequest`: neither is a reason for cloud fallback). A backend failure is an
    inference failure naming the model, which the fallback policy may send to the cloud.
    Anything else is a bug: logged with its traceback, reported without internals.
    A class, not a generator-based context manager: it is on every request's path."""

    __slots__ = ("_model", "_name")

    def __init__(self, name: str, *, model: bool = False) -> None:
        self._name = name
        self._model = model  # the message says "model 'x'", built only on a failure

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, _: object
    ) -> None:
        if e is None or not isinstance(e, Exception) or isinstance(e, DaemonError):
            return  # our own errors, cancellation and exits keep their meaning
        what = f"model {self._name!r}" if self._model else self._name
        if isinstance(e, BackendError):
            raise InferenceFailed(f"{what}: {e}") from e
        log.error("local run of %s failed", what, exc_info=e)
        raise InferenceFailed(f"{what}: internal error: {type(e).__name__}") from e


async def _wait(work: Future[T], wait_s: float, hold: Hold) -> T:
    """Await ``work`` for at most ``wait_s``; past it the work is cancelled if it has
    not started, else handed to ``hold`` (it may still finish or be stopped later)."""
    call = asyncio.wrap_future(work)
    try:
        async with timeout(wait_s):  # not wait_for: see wasmgate.runtime.ops.tasks
            return await asyncio.shield(call)
    except (TimeoutError, asyncio.CancelledError):
        if not work.cancel():
            hold(call)
        raise


async def _batched(
    batcher: Batcher, inputs: list[npt.NDArray[Any]], deadline: float, left: float, hold: Hold
) -> list[npt.NDArray[Any]]:
    """Await a batched run on the loop (`Batcher.submit_async`: one loop wake-up per batch,
    where ``wrap_future`` cost one per request). Past ``left`` a request still queued is
    withdrawn; one already in a running batch keeps the slot (``hold``) until it ends."""
    waiter, request = batcher.submit_async(inputs, deadline=deadline)
    try:
        async with timeout(left):
            return await waiter
    except TimeoutError:
        if not request.cancel():
            hold(asyncio.wrap_future(request))
        raise DeadlineExceeded(f"model {batcher.name!r}: deadline exceeded") from None
    except asyncio.CancelledError:
        if not request.cancel():
            hold(asyncio.wrap_future(request))
        raise


def start_model(
    pool: Executor,
    handle: ModelHandle,
    inputs: list[npt.NDArray[Any]],
    deadline: float,
    took: list[float] | None = None,
) -> Future[list[npt.NDArray[Any]]]:
    """Start one unbatched run on the worker pool (its infer time appended to ``took``),
    the deadline with it (a `Batcher` goes through `_batched` instead)."""
    return pool.submit(functools.partial(_timed, handle, inputs, deadline, took))


def _nbytes(inputs: list[npt.NDArray[Any]]) -> int:
    return inputs[0].nbytes if len(inputs) == 1 else sum(a.nbytes for a in inputs)


def _inline_run(
    handle: ModelHandle, inputs: list[npt.NDArray[Any]], deadline: float, took: list[float]
) -> list[npt.NDArray[Any]] | None:
    """A run on the loop; None when a batcher could not start it at once (it never waits
    for a batch here: the caller then awaits one)."""
    if not isinstance(handle, Batcher):
        return _timed(handle, inputs, deadline, took)
    start = time.perf_counter()
    outputs = handle.infer_now(inputs, deadline=deadline)
    if outputs is not None:
        took.append(time.perf_counter() - start)
    return outputs


def _timed(
    handle: ModelHandle, inputs: list[npt.NDArray[Any]], deadline: float, took: list[float] | None
) -> list[npt.NDArray[Any]]:
    start = time.perf_counter()
    outputs = handle.infer(inputs, deadline=deadline)
    if took is not None:
        took.append(time.perf_counter() - start)
    return outputs


async def execute_model(
    pool: Executor,
    served: ServedModel,
    inputs: list[npt.NDArray[Any]],
    deadline: float,
    timings: dict[str, float],
    *,
    hold: Hold,
    policy: InlinePolicy | None = None,
    pool_busy: bool = True,
) -> list[npt.NDArray[Any]]:
    """Direct tensor inference (validated inputs in spec order) through the model's handle:
    inline on the loop when ``policy`` says the model is tiny and the pool is not
    ``pool_busy`` (see `wasmgate.runtime.serving.inline`), else on the pool."""
    handle = served.handle
    if handle is None:
        raise InferenceFailed(f"model {served.name!r} is not loaded")
    left = remaining(deadline)
    start = time.monotonic()
    batcher = handle if isinstance(handle, Batcher) else None
    # A batched model is a candidate too while batching does not pay (it passes through).
    # Read once: a hint either way (`Batcher.infer_now` decides under the batcher's lock).
    batching = batcher if batcher is not None and not batcher.passes_through() else None
    inline = (
        policy is not None
        and batching is None
        and policy.inline(served.name, _nbytes(inputs), pool_busy)
    )
    took: list[float] = []
    with _local_failures(served.name, model=True):
        outputs = _inline_run(handle, inputs, deadline, took) if inline else None
        ran_inline = outputs is not None
        if outputs is None and batching is not None:
            outputs = await _batched(batching, inputs, deadline, left, hold)
            cost = batching.run_cost()  # the model's own time, not the hop's
            if cost is not None:
                took.append(cost)
        elif outputs is None:  # unbatched, or batching does not pay: a worker of the pool
            try:  # runs it (a passing-through `Batcher.infer` on that worker's own thread)
                future = start_model(pool, handle, inputs, deadline, took)
                outputs = await _wait(future, left, hold)
            except TimeoutError:
                raise DeadlineExceeded(f"model {served.name!r}: deadline exceeded") from None
    if policy is not None and took:
        policy.record(served.name, took[0], inline=ran_inline)
    timings["inference"] = time.monotonic() - start
    return outputs

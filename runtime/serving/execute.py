"""Local execution on the worker pool: one adapter run in the sandbox, one direct model run.

Both are awaited with the request's remaining time (plus a short grace, because the
sandbox's own epoch deadline normally fires first and says more precisely what happened).
Sandbox and backend exceptions become `wasmgate.runtime.errors` types here, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy.typing as npt

from wasmgate.runtime.bundles.loaded import GuestOutcome, LoadedBundle, ServedModel
from wasmgate.runtime.errors import (
    BackendError,
    BadRequest,
    DaemonError,
    DeadlineExceeded,
    InferenceFailed,
)
from wasmgate.runtime.serving.api import AdapterAnswer, AdapterRequest
from wasmgate.sandbox.errors import GuestDeadlineExceeded, GuestOutputTooLarge, SandboxError

log = logging.getLogger("wasmgate.service")

# The sandbox's deadline (epoch interruption) fires at the request deadline; we wait this much
# longer for its precise verdict before answering DeadlineExceeded ourselves.
_GRACE_S = 0.25
_MAX_ERROR_CHARS = 512


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("deadline passed before the request could run")
    return left


def guest_meta(bundle: LoadedBundle, req: AdapterRequest) -> dict[str, str]:
    """What the guest may read through ``wasmgate.meta``: transport facts plus params."""
    meta = {f"param.{k}": v for k, v in bundle.params.items()}
    meta.update(req.meta)
    meta["adapter"] = req.adapter
    meta["content_type"] = req.content_type or ""
    meta.setdefault("transport", "local")
    return meta


async def execute_adapter(
    pool: Executor,
    bundle: LoadedBundle,
    req: AdapterRequest,
    deadline: float,
    timings: dict[str, float],
) -> AdapterAnswer:
    """Run the adapter once; raises BadRequest (status 1) or InferenceFailed (2, traps)."""
    adapter = bundle.adapter
    if adapter is None:
        raise InferenceFailed(f"bundle {bundle.name!r} has no adapter")
    left = _remaining(deadline)
    limits = bundle.guest_limits(left)
    loop = asyncio.get_running_loop()
    call = loop.run_in_executor(
        pool, adapter.run, req.payload, guest_meta(bundle, req), bundle.provider, limits
    )
    with _local_failures(req.adapter):
        try:
            result: GuestOutcome = await asyncio.wait_for(call, left + _GRACE_S)
        except TimeoutError:
            raise DeadlineExceeded(f"{req.adapter}: deadline exceeded") from None
        except GuestDeadlineExceeded as e:
            raise DeadlineExceeded(f"{req.adapter}: deadline exceeded in the sandbox") from e
        except GuestOutputTooLarge as e:
            raise InferenceFailed(f"{req.adapter}: answer too large: {e}") from e
        except SandboxError as e:
            raise InferenceFailed(f"{req.adapter}: {e}") from e
    for line in result.logs:
        log.debug("guest: %s", line, extra={"adapter": req.adapter})
    timings["inference"] = result.infer_s
    timings["sandbox"] = max(0.0, result.instantiate_s + result.run_s - result.infer_s)
    return _answer(bundle, req, result, timings)


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


@contextlib.contextmanager
def _local_failures(what: str) -> Iterator[None]:
    """The one translation of a local run's failure, for adapters and models alike.

    Our own errors keep their meaning (a closing batcher stays `NotReady`, a client mistake
    stays `BadRequest`: neither is a reason for cloud fallback). A backend failure is an
    inference failure naming the model, which the fallback policy may send to the cloud.
    Anything else is a bug: logged with its traceback, reported without internals."""
    try:
        yield
    except BackendError as e:
        raise InferenceFailed(f"{what}: {e}") from e
    except DaemonError:
        raise
    except Exception as e:
        log.exception("local run of %s failed", what)
        raise InferenceFailed(f"{what}: internal error: {type(e).__name__}") from e


async def execute_model(
    pool: Executor,
    served: ServedModel,
    inputs: Sequence[npt.NDArray[Any]],
    deadline: float,
    timings: dict[str, float],
) -> list[npt.NDArray[Any]]:
    """Direct tensor inference through the model's Batcher (or LoadedModel)."""
    handle = served.handle
    if handle is None:
        raise InferenceFailed(f"model {served.name!r} is not loaded")
    left = _remaining(deadline)
    start = time.monotonic()
    submit = getattr(handle, "submit", None)
    if submit is not None:
        call: asyncio.Future[list[npt.NDArray[Any]]] = asyncio.wrap_future(submit(list(inputs)))
    else:
        call = asyncio.get_running_loop().run_in_executor(pool, handle.infer, list(inputs))
    with _local_failures(f"model {served.name!r}"):
        try:
            outputs = await asyncio.wait_for(call, left)
        except TimeoutError:
            raise DeadlineExceeded(f"model {served.name!r}: deadline exceeded") from None
    timings["inference"] = time.monotonic() - start
    return outputs

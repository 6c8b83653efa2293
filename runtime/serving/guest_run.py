"""One guest run, on a worker thread or inline on the event loop (`execute_adapter` decides).

Inline runs (`inline_run`) follow `wasmgate.runtime.serving.inline`'s policy plus two rules
of their own: the bundle keeps no state (`may_inline`), because a run that reaches its
inline budget (`InlinePolicy.budget_s`) is thrown away and made again on the pool — safe
only when it can have left no trace — and a guest on the loop never waits for a batch: it
sees its batched models through `NowModels`, which runs a call only when the batcher would
start it at once on the caller's thread (`Batcher.infer_now`: nothing queued, a batch slot
free, no companion worth waiting for). A call that would have waited fails instead, and the
whole run is thrown away and made again on the pool, where it may wait (the adapter then
warms up on the pool again before its next inline run, so a model that really forms batches
keeps them).

Why a batched model is no reason to leave the loop: on the pool, a guest crosses between
Python and native code about ten times per request (every wasi-nn and WASI host call, the
wasm calls themselves), and each crossing back into Python waits for the GIL while the
event loop holds it: with the loop busy on other connections that is a hand-off (a futex
wait, up to a switch interval) per crossing. Measured on the demo's digits adapter
(`bench/bench_cores.py`), a request on the pool cost 14 context switches and the adapter
served fewer requests with two CPUs than with one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.errors import DeadlineExceeded
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.runtime.served.loaded import GuestOutcome, LoadedBundle, RunnableAdapter
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.sandbox.errors import GuestDeadlineExceeded, SandboxError
from wasmgate.sandbox.models import ModelHandle, ModelProvider
from wasmgate.sandbox.spans import span

log = logging.getLogger("wasmgate.service")

Later = Callable[[Callable[[], None]], object]


def remaining(deadline: float) -> float:
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


def may_inline(
    bundle: LoadedBundle, policy: InlinePolicy, req: AdapterRequest, pool_busy: bool, crowded: bool
) -> bool:
    # A run on the loop may be thrown away and made again (see `inline_run`): only when it
    # can leave no trace, i.e. no state namespace (batched models: `NowModels`).
    return bundle.state is None and policy.inline(
        f"adapter:{req.adapter}", len(req.payload), pool_busy, crowded=crowded
    )


class WouldWait(Exception):
    """A batched model call on the loop that could not start at once (see `NowModels`)."""


class NowModels:
    """A bundle's models as a guest on the event loop sees them: a batched model's call runs
    only if its batcher starts it at once on this thread, else it fails and ``waited`` is
    set (the run is then thrown away: `inline_run`). Unbatched models are unchanged."""

    __slots__ = ("_models", "waited")

    def __init__(self, models: ModelProvider) -> None:
        self._models = models
        self.waited = False

    def by_name(self, name: str) -> ModelHandle | None:
        return self._now(self._models.by_name(name))

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        return self._now(self._models.from_bytes(data, encoding, target))

    def _now(self, handle: ModelHandle | None) -> ModelHandle | None:
        return _NowHandle(handle, self) if isinstance(handle, Batcher) else handle


class _NowHandle:
    """`ModelHandle` of a batched model for a guest on the loop (`NowModels`)."""

    __slots__ = ("_batcher", "_owner", "inputs", "name", "outputs")

    def __init__(self, batcher: Batcher, owner: NowModels) -> None:
        self._batcher, self._owner = batcher, owner
        self.name, self.inputs, self.outputs = batcher.name, batcher.inputs, batcher.outputs

    def infer(self, inputs: Sequence[Any], *, deadline: float | None = None) -> list[Any]:
        outputs = self._batcher.infer_now(inputs, deadline=deadline)
        if outputs is None:
            self._owner.waited = True
            raise WouldWait(f"model {self.name}: the call would wait for a batch")
        return outputs


def inline_run(
    adapter: RunnableAdapter,
    bundle: LoadedBundle,
    req: AdapterRequest,
    deadline: float,
    policy: InlinePolicy,
) -> GuestOutcome | None:
    """One guest run on the event loop, bounded by ``policy.budget_s`` (or the request's
    deadline if sooner); None when it reached the budget: whatever it produced (a deadline
    trap, or an answer shaped by a model call cut short) is thrown away, the adapter gets a
    strike, and the caller runs the request again on the pool with its remaining time."""
    left = remaining(deadline)
    budget = min(left, policy.budget_s)
    limits = bundle.guest_limits(budget)
    later = asyncio.get_running_loop().call_soon
    models = NowModels(bundle.provider) if bundle.calls_batched else None
    start = time.monotonic()
    trapped = False
    try:
        result = run_guest(adapter, bundle, req, limits, after=later, models=models)
    except GuestDeadlineExceeded:
        if budget >= left:
            raise  # the request's own deadline
        # The budget's epoch deadline: a strike. Deadlines count from the time the epoch
        # stands for (`wasmgate.sandbox.epoch`), so it fires early only past a ticker
        # stalled beyond the lag they make up for; even then the guest did not finish
        # inside the budget as the sandbox counts it, and without a strike it would stall
        # the loop again on the next request.
        result, trapped = None, True
    except SandboxError:
        if budget >= left or time.monotonic() - start < budget:
            raise  # a failure no deadline caused
        result = None
    took = time.monotonic() - start
    if models is not None and models.waited:  # it would have waited for a batch: the pool's
        policy.back_off(f"adapter:{req.adapter}")
        return None
    if result is not None and (budget >= left or took < budget):
        return result  # no inline budget fired: the pool would have produced the same
    if trapped or took >= budget:
        policy.strike(f"adapter:{req.adapter}", max(took, budget))
        log.warning("adapter %s ran past its inline budget (%.1f ms); back to the worker pool",
                    req.adapter, took * 1e3)  # fmt: skip
    return None


def run_guest(
    adapter: RunnableAdapter,
    bundle: LoadedBundle,
    req: AdapterRequest,
    limits: Any,
    *,
    after: Later | None = None,
    models: ModelProvider | None = None,
) -> GuestOutcome:
    """One guest run (a worker thread, or the loop: ``after``, ``models``), in a ``sandbox``
    span; ``models`` replaces the bundle's provider (`NowModels` on the loop)."""
    with span(
        "sandbox", lambda: {"wasmgate.adapter": req.adapter, "wasmgate.version": bundle.version}
    ) as current:
        meta = guest_meta(bundle, req)
        provider = bundle.provider if models is None else models
        result = adapter.run(req.payload, meta, provider, limits, state=bundle.state, after=after)
        if current is not None:
            current.set_attribute("wasmgate.guest.status", result.status)
        return result

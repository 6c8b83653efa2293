"""One guest run, on a worker thread or inline on the event loop (`execute_adapter` decides).

Inline runs (`inline_run`) follow `wasmgate.runtime.serving.inline`'s policy plus two rules
of their own (`may_inline`): the bundle keeps no state and calls no batched model, because
a run that reaches ``INLINE_BUDGET_S`` is thrown away and made again on the pool — safe only
when it can have left no trace — and a guest on the loop must never wait for a batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from wasmgate.runtime.errors import DeadlineExceeded
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.runtime.served.loaded import GuestOutcome, LoadedBundle, RunnableAdapter
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.sandbox.errors import GuestDeadlineExceeded, SandboxError
from wasmgate.sandbox.spans import span

log = logging.getLogger("wasmgate.service")

INLINE_BUDGET_S = 0.005
"""How long an adapter run on the loop may take before it is thrown away and made again
on the pool (the loop stalls at most this plus one epoch tick, once per strike)."""
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
    # can leave no trace, i.e. no state namespace; and it must never wait for a batch.
    return (
        bundle.state is None
        and not bundle.calls_batched
        and policy.inline(f"adapter:{req.adapter}", len(req.payload), pool_busy, crowded=crowded)
    )


def inline_run(
    adapter: RunnableAdapter,
    bundle: LoadedBundle,
    req: AdapterRequest,
    deadline: float,
    policy: InlinePolicy,
) -> GuestOutcome | None:
    """One guest run on the event loop, bounded by ``INLINE_BUDGET_S`` (or the request's
    deadline if sooner); None when it reached the budget: whatever it produced (a deadline
    trap, or an answer shaped by a model call cut short) is thrown away, the adapter gets a
    strike, and the caller runs the request again on the pool with its remaining time."""
    left = remaining(deadline)
    budget = min(left, INLINE_BUDGET_S)
    limits = bundle.guest_limits(budget)
    later = asyncio.get_running_loop().call_soon
    start = time.monotonic()
    trapped = False
    try:
        result = run_guest(adapter, bundle, req, limits, after=later)
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
    after: Later | None = None,
) -> GuestOutcome:
    """One guest run (a worker thread, or the loop: ``after``), in a ``sandbox`` span."""
    with span(
        "sandbox", lambda: {"wasmgate.adapter": req.adapter, "wasmgate.version": bundle.version}
    ) as current:
        meta = guest_meta(bundle, req)
        result = adapter.run(
            req.payload, meta, bundle.provider, limits, state=bundle.state, after=after
        )
        if current is not None:
            current.set_attribute("wasmgate.guest.status", result.status)
        return result

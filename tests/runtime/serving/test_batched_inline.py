"""A batched model that batching does not pay for runs inline like an unbatched tiny one;
the event loop never waits for a batch."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from tests.fixtures.waits import until_async
from tests.runtime.batching.test_batcher import _model, _rows
from tests.runtime.batching.test_pacing import _batch_one, _twice
from tests.runtime.serving.test_inline import Recording, _no_hold
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.served.loaded import ServedModel
from wasmgate.runtime.serving.execute import execute_model
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.runtime.serving.scheduler import FairPool


def _policy() -> InlinePolicy:
    return InlinePolicy(cap_s=0.05)  # the routing rule is under test here, not the cap


def _no_gain(batcher: Batcher) -> None:
    """Measured as a tiny model that batching does not pay for (bigger batches cost as
    much per row): its callers pass through."""
    _batch_one(batcher.pacer, 20e-6)
    _twice(batcher.pacer, 2, 40e-6)
    _twice(batcher.pacer, 8, 160e-6)


def _served(batcher: Batcher, model: Recording, n: int, policy: InlinePolicy) -> list[bool]:
    """Per request, in order: whether the model ran on the event loop's own thread."""
    x = _rows(1)
    loop_thread: list[int] = []

    async def requests() -> None:
        loop_thread.append(threading.get_ident())
        with FairPool(2) as pool:
            served = ServedModel("mlp", batcher, batched=True)
            for _ in range(n):
                deadline = time.monotonic() + 30
                out = await execute_model(pool, served, [x], deadline, {}, hold=_no_hold,
                                          policy=policy, pool_busy=False)  # fmt: skip
                np.testing.assert_allclose(out[0], model.inner.infer([x])[0], rtol=1e-6)

    asyncio.run(requests())
    return [ident == loop_thread[0] for ident in model.threads]


def test_passing_through_a_tiny_batched_model_runs_on_the_loop_after_warm_up() -> None:
    model = Recording(_model())
    with Batcher(model, 32, 2000) as batcher:
        _no_gain(batcher)
        assert batcher.passes_through()
        on_loop = _served(batcher, model, 60, _policy())
        stats = batcher.stats()
    assert on_loop[:8] == [False] * 8  # measured first, on the pool
    assert on_loop[8:] == [True] * 52  # then inline, as an unbatched tiny model
    # Every run was a caller's own (a pool worker's, then the loop's): none waited for the
    # dispatcher, whose thread per CPU would run fewer side by side than the pool does.
    assert stats.inline == 60


def test_while_batches_may_form_nothing_runs_on_the_loop() -> None:
    model = Recording(_model())
    with Batcher(model, 32, 2000) as batcher:
        assert not batcher.passes_through()  # nothing measured yet: batches may form
        on_loop = _served(batcher, model, 12, _policy())
    assert not any(on_loop)


def test_infer_now_never_waits_for_a_batch() -> None:
    model = Recording(_model(), sleep_s=0.3)
    with Batcher(model, 32, 2000) as batcher:  # nothing measured: batches may form
        running = batcher.submit([_rows(1)])
        while not model.threads:  # the dispatcher runs it: the one worker is busy
            time.sleep(0.001)
        start = time.monotonic()
        got = batcher.infer_now([_rows(1)], deadline=time.monotonic() + 30)
        waited = time.monotonic() - start
        running.result(10)
        stats = batcher.stats()
    assert (got, stats.inline, stats.requests) == (None, 0, 1)  # nothing queued either
    assert waited < 0.1  # not the 0.3 s the running batch takes


def test_a_slow_model_batching_does_not_pay_for_runs_side_by_side_on_the_pool() -> None:
    model = Recording(_model(), sleep_s=0.1)  # far over the inline cap: never on the loop
    x = _rows(1)

    async def four_at_once(batcher: Batcher) -> None:
        with FairPool(4) as pool:
            served = ServedModel("mlp", batcher, batched=True)
            calls = [
                execute_model(pool, served, [x], time.monotonic() + 30, {}, hold=_no_hold,
                              policy=_policy(), pool_busy=False)
                for _ in range(4)
            ]  # fmt: skip
            for out in await asyncio.gather(*calls):
                np.testing.assert_allclose(out[0], model.inner.infer([x])[0], rtol=1e-6)

    with Batcher(model, 32, 2000, workers=1) as batcher:  # one batch at a time
        _no_gain(batcher)
        assert batcher.passes_through()
        asyncio.run(four_at_once(batcher))
        stats = batcher.stats()
    # Pool workers ran them side by side, as for an unbatched model (the pool's share for
    # one tenant: 3 of its 4 workers); through the dispatcher's one worker they would have
    # run one after another on one thread.
    assert len(set(model.threads[-4:])) == 3
    assert stats.inline == 4


def test_a_passing_through_batched_model_keeps_tenants_fair() -> None:
    """Two tenants on one batched model that passes through: the flood's runs queue in its
    own share of the pool, so the quiet tenant's one request is not served behind them (as
    it would be through a dispatcher shared by every caller of the model)."""
    model = Recording(_model(), sleep_s=0.05)  # over the inline cap: always the pool
    x = _rows(1)
    finished: list[str] = []

    async def one(pool: FairPool, tenant: str, served: ServedModel) -> None:
        await execute_model(pool.for_tenant(tenant, 1.0), served, [x], time.monotonic() + 30,
                            {}, hold=_no_hold, policy=_policy(), pool_busy=True)  # fmt: skip
        finished.append(tenant)

    async def flood_then_quiet(batcher: Batcher) -> None:
        with FairPool(2) as pool:  # one worker per tenant while both are seen
            served = ServedModel("mlp", batcher, batched=True)
            flood = [asyncio.create_task(one(pool, "flood", served)) for _ in range(8)]

            def submitted() -> float:  # the flood's jobs in the pool, or done already
                now = pool.stats().get("flood", {})
                return now.get("running", 0) + now.get("queued", 0) + finished.count("flood")

            await until_async(lambda: submitted() >= 8, "the flood's 8 in the pool")
            await one(pool, "quiet", served)
            await asyncio.gather(*flood)

    with Batcher(model, 32, 2000, workers=1) as batcher:
        _no_gain(batcher)
        assert batcher.passes_through()
        asyncio.run(flood_then_quiet(batcher))
    assert len(finished) == 9
    assert finished.index("quiet") <= 2, finished  # not 9th, behind the whole flood

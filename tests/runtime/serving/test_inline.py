"""Tiny models run inline on the event loop; slow ones, big inputs and a busy pool do not."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.runtime.batching.test_batcher import _model, _rows
from wasmgate.runtime.backends import LoadedModel
from wasmgate.runtime.backends.base import Array
from wasmgate.runtime.errors import InferenceFailed
from wasmgate.runtime.served.loaded import ServedModel
from wasmgate.runtime.serving.execute import execute_model
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.runtime.serving.scheduler import FairPool


class Recording(LoadedModel):
    """A real model that notes the thread of every ``infer`` (and may sleep or fail first)."""

    def __init__(self, inner: LoadedModel, sleep_s: float = 0.0) -> None:
        super().__init__(
            name=inner.name, inputs=inner.inputs, outputs=inner.outputs, backend=inner.backend,
            providers=inner.providers, precision=inner.precision,
        )  # fmt: skip
        self.inner, self.sleep_s = inner, sleep_s
        self.threads: list[int] = []
        self.fail: Exception | None = None

    def _run(self, inputs: Sequence[Array], deadline: float | None) -> list[Array]:
        self.threads.append(threading.get_ident())
        time.sleep(self.sleep_s)
        if self.fail is not None:
            raise self.fail
        return self.inner.infer(inputs, deadline=deadline)

    def close(self) -> None:
        self.inner.close()


def _no_hold(work: asyncio.Future[Any]) -> None:
    raise AssertionError(f"nothing outlives its deadline here: {work}")


async def _run(model: Recording, policy: InlinePolicy, x: Array, n: int, busy: bool) -> None:
    served = ServedModel("mlp", model)
    with FairPool(2) as pool:
        for _ in range(n):
            out = await execute_model(pool, served, [x], time.monotonic() + 30, {},
                                      hold=_no_hold, policy=policy, pool_busy=busy)  # fmt: skip
            np.testing.assert_allclose(out[0], model.inner.infer([x])[0], rtol=1e-6)


def test_policy_rules() -> None:
    p = InlinePolicy(cap_s=1e-3, max_bytes=100)
    for _ in range(7):
        p.record("m", 1e-5)
    assert not p.inline("m", 10, pool_busy=False)  # still warming up
    p.record("m", 1e-5)
    assert p.inline("m", 10, pool_busy=False)
    assert not p.inline("m", 10, pool_busy=True)
    assert not p.inline("m", 101, pool_busy=False)
    assert not p.inline("other", 10, pool_busy=False)
    for _ in range(100):
        p.record("m", 5e-3)  # it got slow: back to the pool
    assert not p.inline("m", 10, pool_busy=False)
    assert not InlinePolicy(cap_s=0).inline("m", 10, pool_busy=False)


def test_one_preempted_run_does_not_send_a_tiny_model_to_the_pool() -> None:
    p = InlinePolicy(cap_s=2e-4)
    for _ in range(8):
        p.record("m", 2e-5, inline=True)
    p.record("m", 5e-3, inline=True)  # the vCPU was taken away mid-run
    p.record("m", 5e-3)  # and a pool run measured the GIL hand-back
    assert p.inline("m", 10, pool_busy=False)
    runs = 0
    while p.inline("m", 10, pool_busy=False) and runs < 25:  # it really got slow
        p.record("m", 5e-3, inline=True)
        p.record("m", 5e-3)
        runs += 1
    assert not p.inline("m", 10, pool_busy=False)  # off the loop within 25 runs,
    assert runs > 3  # by steps, not at the first slow run


def test_the_crowded_cap_applies_when_the_caller_says_so() -> None:
    p = InlinePolicy(cap_s=1e-3, crowded_cap_s=2e-4)
    for _ in range(8):
        p.record("a", 5e-4)
    assert p.inline("a", 10, pool_busy=False)
    assert not p.inline("a", 10, pool_busy=False, crowded=True)
    assert InlinePolicy(cap_s=1e-4, crowded_cap_s=1.0).crowded_cap_s == 1e-4  # never above


def test_crowded_reads_inline_runs_and_probes_the_unmeasured() -> None:
    p = InlinePolicy(cap_s=1e-3, crowded_cap_s=3e-4)
    for _ in range(16):
        p.record("a", 5e-4)  # the pool's figure: over the crowded cap
    crowded = [p.inline("a", 10, False, crowded=True) for _ in range(1)]
    assert crowded == [True]  # calls == 16: the probe
    p.record("a", 1e-4, inline=True)  # what it really costs on the loop
    assert p.inline("a", 10, False, crowded=True)
    for _ in range(40):
        p.record("a", 2e-3, inline=True)  # it got slow inline
    assert not p.inline("a", 10, False)
    probes = 0
    for _ in range(32):
        probes += p.inline("a", 10, False, crowded=True)
        p.record("a", 1e-4)  # fast again on the pool
    assert p.inline("a", 10, False)  # the pool's figure brings it back uncrowded
    assert 1 <= probes <= 32 // 16  # measured again inline, one call in 16 at most


def test_strikes_double_the_warmup_up_to_a_cap() -> None:
    p = InlinePolicy(cap_s=1e-3)
    for _ in range(8):
        p.record("a", 1e-5)
    assert p.inline("a", 10, pool_busy=False)
    for strike in range(1, 9):
        p.strike("a", 0.006)
        warmup = 8 * 2 ** min(strike, 6)
        for _ in range(warmup - 1):
            assert not p.inline("a", 10, pool_busy=False)
            p.record("a", 1e-5)
        assert not p.inline("a", 10, pool_busy=False)
        p.record("a", 1e-5, inline=False)
        assert p.inline("a", 10, pool_busy=False)  # back after its warm-up: never banned
    p.record("a", 1e-5, inline=True)
    assert p.figures() == {"a": (1, 8)}


def test_tiny_model_runs_on_the_loop_after_warmup() -> None:
    model = Recording(_model())

    async def main() -> int:
        await _run(model, InlinePolicy(cap_s=1.0), _rows(1), 12, busy=False)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert loop_thread not in model.threads[:8]
    assert model.threads[8:] == [loop_thread] * 4


@pytest.mark.parametrize("case", ["slow", "busy", "big"])
def test_slow_model_busy_pool_or_big_input_stay_off_the_loop(case: str) -> None:
    model = Recording(_model(), sleep_s=0.002 if case == "slow" else 0.0)
    policy = InlinePolicy(cap_s=1e-3 if case == "slow" else 1.0, max_bytes=16 * 4)
    x = _rows(2 if case == "big" else 1)

    async def main() -> int:
        await _run(model, policy, x, 12, busy=case == "busy")
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert len(model.threads) == 12
    assert loop_thread not in model.threads


def test_inline_failure_is_the_same_error_as_in_the_pool() -> None:
    model = Recording(_model())

    async def main() -> None:
        policy = InlinePolicy(cap_s=1.0)
        await _run(model, policy, _rows(1), 8, busy=False)
        model.fail = RuntimeError("boom")
        with pytest.raises(InferenceFailed, match="internal error: RuntimeError"):
            await _run(model, policy, _rows(1), 1, busy=False)
        assert model.threads[-1] == threading.get_ident()  # it did run inline

    asyncio.run(main())


def test_fair_pool_says_when_jobs_wait() -> None:
    hold = threading.Event()
    with FairPool(1) as pool:
        assert not pool.has_queued()
        running = pool.submit_as("a", 1.0, hold.wait, 30)
        queued = pool.submit_as("b", 1.0, lambda: None)
        assert pool.has_queued()
        hold.set()
        queued.result(30)
        running.result(30)
        assert not pool.has_queued()

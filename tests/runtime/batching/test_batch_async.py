"""`Batcher.submit_async`: asyncio callers awaiting a batch (results, errors, deadlines)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from tests.runtime.backends.models import mlp_reference
from tests.runtime.batching.gated import GatedModel
from tests.runtime.batching.test_batcher import _model, _rows
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.errors import BackendError, DeadlineExceeded


def test_awaiting_callers_get_their_rows_from_one_batch() -> None:
    gated = GatedModel(_model())

    async def main(b: Batcher) -> list[np.ndarray]:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)  # the worker is held: the next requests queue
        waiters = [b.submit_async([_rows(1 + i % 2, i)])[0] for i in range(5)]
        gated.gate.set()
        outputs = await asyncio.gather(*waiters)
        assert blocker.result(10)[0].shape == (1, 8)
        return [out[0] for out in outputs]

    with Batcher(gated, 16, 0) as b:
        got = asyncio.run(main(b))
        assert b.stats().batch_sizes == {1: 1, 7: 1}  # 1+2+1+2+1 rows in one run
    for i, y in enumerate(got):
        np.testing.assert_allclose(y, mlp_reference(_rows(1 + i % 2, i)), rtol=1e-5)


def test_a_backend_error_reaches_every_awaiting_caller() -> None:
    gated = GatedModel(_model())

    async def main(b: Batcher) -> None:
        b.submit([_rows(1)])
        assert gated.entered.wait(5)
        gated.fail = BackendError("device lost")
        waiters = [b.submit_async([_rows(1)])[0] for _ in range(3)]
        gated.gate.set()
        for waiter in waiters:
            with pytest.raises(BackendError, match="device lost"):
                await waiter

    with Batcher(gated, 8, 0) as b:
        asyncio.run(main(b))


def test_a_queued_awaited_request_fails_at_its_deadline() -> None:
    gated = GatedModel(_model())

    async def main(b: Batcher) -> None:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        late = b.submit_async([_rows(1)], deadline=time.monotonic() + 0.2)[0]
        with pytest.raises(DeadlineExceeded, match="deadline passed after"):
            await late
        gated.gate.set()
        blocker.result(10)

    with (
        BatchDispatcher(2, "async-expiry") as dispatcher,
        Batcher(gated, 8, 60_000_000, dispatcher=dispatcher) as b,
    ):
        asyncio.run(main(b))
        assert (b.stats().expired, b.pending_count(), gated.calls) == (1, 0, 1)


def test_cancelling_the_await_takes_the_request_out_of_the_queue() -> None:
    gated = GatedModel(_model())

    async def main(b: Batcher) -> None:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        waiter = b.submit_async([_rows(1)])[0]
        assert b.pending_count() == 1
        waiter.cancel()
        await asyncio.sleep(0)  # (the loop runs the future's done callbacks)
        assert b.pending_count() == 0
        gated.gate.set()
        blocker.result(10)

    with Batcher(gated, 8, 0) as b:
        asyncio.run(main(b))
    assert gated.calls == 1  # the cancelled request never ran


def test_a_batch_ending_after_its_callers_loop_closed_harms_nothing() -> None:
    gated = GatedModel(_model())

    async def abandon(b: Batcher) -> None:
        pending, _ = b.submit_async([_rows(1)])  # never awaited: asyncio.run closes the loop
        assert not pending.done()

    with Batcher(gated, 8, 0) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        asyncio.run(abandon(b))
        gated.gate.set()
        blocker.result(10)
        x = _rows(1, 7)  # the dispatcher thread survived the closed loop
        np.testing.assert_allclose(b.submit([x]).result(10)[0], mlp_reference(x), rtol=1e-5)
        assert b.stats().requests == 3

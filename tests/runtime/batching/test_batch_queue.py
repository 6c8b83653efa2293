"""The batch queue's kept sums and the dispatcher's wake-up decisions (explicit times)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from tests.fixtures.waits import until
from tests.runtime.backends.models import mlp_reference
from tests.runtime.batching.gated import GatedModel
from tests.runtime.batching.test_batcher import _model, _rows
from wasmgate.runtime.batching.batch_queue import BatchQueue, Item, new_item
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.batching.dispatch import BatchDispatcher


def _item(queue: BatchQueue, rows: int, width: int = 16, deadline: float | None = None) -> Item:
    return new_item("m", [np.zeros((rows, width), np.float32)], deadline, queue)


def _queued(queue: BatchQueue, *items: Item) -> list[Item]:
    for item in items:
        queue.append(item)
    return list(items)


def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    until(check, "the condition", timeout, every_s=0.001)


def test_rows_per_key_and_the_earliest_deadline_follow_every_change() -> None:
    q = BatchQueue("m")
    a, b, c, d = _queued(
        q, _item(q, 2, deadline=9.0), _item(q, 3, width=5), _item(q, 4, deadline=7.0),
        _item(q, 1, deadline=8.0),
    )  # fmt: skip
    assert (q.compatible_rows(), q.next_deadline()) == (7, 7.0)  # 2 + 4 + 1 of width 16
    assert [i.rows for i in q.take(6)] == [2, 4]  # the oldest, then what fits behind b
    assert [i.rows for i in q.items] == [3, 1]
    assert (q.compatible_rows(), q.next_deadline()) == (3, 8.0)  # b (width 5) is oldest
    q.withdraw(d.future)
    assert (len(q), q.next_deadline()) == (1, None)
    assert q.take(32) == [b]
    assert len(q) == 0
    assert [a.future.done(), c.future.done()] == [False, False]  # taken: a run resolves them


def test_take_stops_at_the_limit_and_an_oversized_oldest_runs_alone() -> None:
    q = BatchQueue("m")
    items = _queued(q, *(_item(q, 3) for _ in range(4)))
    assert q.take(7) == items[:2]  # 3 + 3; a third would make 9
    assert q.compatible_rows() == 6
    big = _queued(q, _item(q, 40))[0]
    assert q.take(7) == items[2:4]
    assert q.take(7) == [big]
    assert len(q) == 0


def test_expire_looks_only_once_a_deadline_passed_or_a_future_was_cancelled() -> None:
    q = BatchQueue("m")
    late, cancelled, fine = _queued(q, _item(q, 1, deadline=5.0), _item(q, 1), _item(q, 1))
    assert (q.expire(4.0), len(q)) == (0, 3)
    assert cancelled.future.cancel()  # a caller gave up (asyncio cancels the future)
    assert q.cancelled
    assert q.expire(4.0) == 0  # dropped, not counted as expired
    assert (list(q.items), q.cancelled) == ([late, fine], False)
    assert q.expire(5.0) == 1
    assert list(q.items) == [fine]
    assert (q.next_deadline(), q.compatible_rows()) == (None, 1)


def test_wakes_by_asks_the_waiting_threads_timers() -> None:
    with BatchDispatcher(1, "timers") as d:
        _until(lambda: d.timers == [float("inf")])  # an idle thread waits for a notify
        with d.cond:
            assert not d.wakes_by(123.0)  # a deadline it would miss
            assert d.wakes_by(None)  # no deadline: nothing to be on time for


def test_a_request_behind_a_busy_worker_wakes_no_dispatcher_thread() -> None:
    gated = GatedModel(_model())
    with (
        BatchDispatcher(2, "quiet") as d,
        Batcher(gated, 8, 0, dispatcher=d) as b,
    ):
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)  # one thread runs the only worker's batch
        _until(lambda: d.timers == [float("inf")])  # the other one waits
        notified: list[int] = []
        original = d.cond.notify

        def counting(n: int = 1) -> None:
            notified.append(n)
            original(n)

        d.cond.notify = counting  # type: ignore[method-assign]
        queued = [b.submit([_rows(1, i)]) for i in range(3)]  # no deadline, worker busy
        assert notified == []
        soon = time.monotonic() + 60
        queued.append(b.submit([_rows(1, 3)], deadline=soon))  # the waiting one must see it
        assert len(notified) == 1
        _until(lambda: d.timers == [soon])
        queued.append(b.submit([_rows(1, 4)], deadline=soon + 1))  # it looks by then anyway
        assert len(notified) == 1
        gated.gate.set()
        blocker.result(10)
        for i, f in enumerate(queued):
            np.testing.assert_allclose(f.result(10)[0], mlp_reference(_rows(1, i)), rtol=1e-5)
        assert b.stats().batch_sizes == {1: 1, 5: 1}


def test_a_request_cancelled_in_the_queue_never_runs() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 8, 0) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        gone, kept = b.submit([_rows(1)]), b.submit([_rows(1, 1)])
        assert gone.cancel()
        gated.gate.set()
        blocker.result(10)
        np.testing.assert_allclose(kept.result(10)[0], mlp_reference(_rows(1, 1)), rtol=1e-5)
        assert b.stats().batch_sizes == {1: 2}  # the blocker, then the one kept

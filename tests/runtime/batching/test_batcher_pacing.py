"""The batcher's measured decisions: run at once when idle, wait only when it pays."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.fixtures.waits import until
from tests.runtime.backends.models import mlp_reference
from tests.runtime.batching.gated import GatedModel
from tests.runtime.batching.test_batcher import _model, _rows
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.batching.pacing import ONE_SAMPLES
from wasmgate.runtime.errors import Busy, DeadlineExceeded

HOUR_US = 3_600_000_000


def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    until(check, "the condition", timeout, every_s=0.005)


def test_an_idle_worker_runs_a_lone_request_at_once() -> None:
    # An hour of max_queue_delay: had the request waited for companions, it would hang.
    with Batcher(_model(), 8, HOUR_US) as b:
        x = _rows(1)
        np.testing.assert_allclose(b.submit([x]).result(10)[0], mlp_reference(x), rtol=1e-5)
        stats = b.stats()
        assert (stats.at_once, stats.waited, stats.inline) == (1, 0, 0)
        assert stats.delay_s == 0.0


def test_a_blocking_caller_finding_the_worker_idle_runs_on_its_own_thread() -> None:
    gated = GatedModel(_model())
    gated.gate.set()
    with Batcher(gated, 8, HOUR_US) as b:
        b.infer([_rows(1)], deadline=time.monotonic() + 30)
        assert gated.threads == [threading.current_thread().name]
        assert b.stats().inline == 1


def test_requests_arriving_while_a_batch_runs_form_the_next_batch() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 8, HOUR_US) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        burst = [b.submit([_rows(1, i)]) for i in range(5)]
        gated.gate.set()
        blocker.result(10)
        for i, f in enumerate(burst):
            np.testing.assert_allclose(f.result(10)[0], mlp_reference(_rows(1, i)), rtol=1e-5)
        assert b.stats().batch_sizes == {1: 1, 5: 1}


def _pays(b: Batcher, gap: float) -> None:
    """Measured as a model where batching pays hugely, with requests ``gap`` apart until
    now (what a loaded batcher would have seen). Called before any request: no dispatcher
    thread reads the pacer yet."""
    for _ in range(ONE_SAMPLES):  # (a first run is not trusted; batch 1 needs more)
        b.pacer.ran(1, 1.0)
        b.pacer.ran(16, 1.6)  # 0.1 s a row instead of 1 s
    now = time.monotonic()
    for i in range(33):
        b.pacer.arrived(now - (32 - i) * gap)


def test_under_load_a_lone_request_waits_for_companions_within_max_delay() -> None:
    with Batcher(_model(), 32, HOUR_US) as b:
        _pays(b, 0.2)
        assert 0 < b.stats().delay_s < 0.25 * 31  # ~ a gap per missing row, not the hour
        x = _rows(1)
        start = time.monotonic()
        np.testing.assert_allclose(b.infer([x])[0], mlp_reference(x), rtol=1e-5)
        waited = time.monotonic() - start
        stats = b.stats()
        assert (stats.waited, stats.inline) == (1, 0)  # queued, held, then run
        assert waited < 60  # cut by the stream's pause (2 gaps), never the hour


def test_at_a_low_rate_the_delay_is_zero_even_when_batching_pays() -> None:
    with Batcher(_model(), 32, 2_000) as b:
        _pays(b, 0.5)  # a request every 0.5 s: none comes within 2 ms
        assert b.stats().delay_s == 0.0
        b.infer([_rows(1)])
        assert b.stats().inline == 1


def test_when_batching_does_not_pay_callers_run_side_by_side() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 8, 2_000) as b:
        for _ in range(2):  # (before any request: no dispatcher thread reads it yet)
            b.pacer.ran(1, 1e-3)
            b.pacer.ran(8, 16e-3)  # per row twice batch 1's: a conv net on 2 cores
        assert b.stats().limit == 1
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(b.infer, [_rows(1, i)]) for i in range(3)]
            _until(lambda: gated.calls == 3)  # all three inside the model at once
            gated.gate.set()
            for f in futures:
                assert f.result(10)[0].shape == (1, 8)
        assert b.stats().inline == 3


def test_busy_and_deadlines_hold_with_measured_pacing() -> None:
    gated = GatedModel(_model())
    with (
        BatchDispatcher(2, "paced") as dispatcher,
        Batcher(gated, 4, HOUR_US, queue_size=2, dispatcher=dispatcher) as b,
    ):
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        late = b.submit([_rows(1)], deadline=time.monotonic() + 0.1)
        fine = b.submit([_rows(1)])
        with pytest.raises(Busy, match="batch queue full"):
            b.submit([_rows(1)])
        with pytest.raises(DeadlineExceeded, match="deadline passed after"):
            late.result(30)
        gated.gate.set()
        for f in (blocker, fine):
            assert f.result(10)[0].shape == (1, 8)
        stats = b.stats()
        assert (stats.expired, stats.rejected_busy, stats.requests) == (1, 1, 2)

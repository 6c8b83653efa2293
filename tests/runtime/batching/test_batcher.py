from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto

from tests.runtime.backends.conftest import X86
from tests.runtime.backends.models import mlp_onnx, mlp_reference, seq_onnx
from tests.runtime.batching.gated import GatedModel
from tests.runtime.bundlekit import slow_model
from tests.runtime.http.models import identity_model
from wasmgate.device_profiles import load_profile
from wasmgate.device_profiles.schema import BatchingCap
from wasmgate.runtime.backends import LoadedModel, LoadOptions, ModelSpec, create_backend
from wasmgate.runtime.backends.watchdog import Watchdog
from wasmgate.runtime.batching.batcher import Batcher, capped
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.errors import BackendError, BadRequest, Busy, DeadlineExceeded, NotReady
from wasmgate.sandbox.models import ModelHandle


def _model(data: bytes | None = None) -> LoadedModel:
    options = LoadOptions(load_profile("generic-x86_64"), host=X86)
    return create_backend("onnx").load(data or mlp_onnx(), ModelSpec("mlp"), options)


def _batch_threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def _rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 16)).astype(np.float32)


def test_concurrent_requests_are_batched_and_split_back() -> None:
    seen: list[tuple[int, int]] = []
    # The first request holds the model until the others are queued: on a loaded machine
    # threads start slower than this tiny model runs, and each would run alone.
    gated = GatedModel(_model())
    with Batcher(gated, 16, 20_000, on_batch=lambda r, q, _s: seen.append((r, q))) as b:
        assert isinstance(b, ModelHandle)
        inputs = [_rows(1 + i % 3, i) for i in range(48)]
        with ThreadPoolExecutor(32) as pool:
            running = pool.map(lambda x: b.infer([x], deadline=time.monotonic() + 60)[0], inputs)
            end = time.monotonic() + 30
            while b.pending_count() < 31 and time.monotonic() < end:  # 32 threads, 1 held
                time.sleep(0.01)
            gated.gate.set()
            outputs = list(running)
        stats = b.stats()
    for x, y in zip(inputs, outputs, strict=True):
        np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5)
    assert stats.requests == 48
    assert stats.rows == sum(len(x) for x in inputs)
    assert stats.batches < 48  # some requests really shared a run
    assert max(stats.batch_sizes) <= 16
    assert sum(r for r, _ in seen) == stats.rows


def test_a_lone_request_is_answered() -> None:
    with Batcher(_model(), 8, 1_000) as b:
        x = _rows(2)
        np.testing.assert_allclose(
            b.infer([x], deadline=time.monotonic() + 5)[0], mlp_reference(x), rtol=1e-5
        )
        assert b.stats().batch_sizes == {2: 1}


def test_fixed_shape_models_cannot_be_batched() -> None:
    with pytest.raises(BackendError, match="dynamic first dimension"):
        Batcher(_model(mlp_onnx(batch=1)), 8, 1000)


def test_full_queue_raises_busy() -> None:
    gated = GatedModel(_model())
    b = Batcher(gated, 4, 0, queue_size=2)
    try:
        first = b.submit([_rows(1)])
        assert gated.entered.wait(5)  # the batch thread is now inside the model
        queued = [b.submit([_rows(1)]) for _ in range(2)]
        with pytest.raises(Busy, match=r"model mlp: batch queue full \(2 requests waiting\)"):
            b.submit([_rows(1)])
        assert b.stats().rejected_busy == 1
        gated.gate.set()
        for f in [first, *queued]:
            assert f.result(5)[0].shape == (1, 8)
    finally:
        gated.gate.set()
        b.close()


def test_batch_size_limit_and_oversized_requests() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 4, 50_000) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        small = [b.submit([_rows(3, i)]) for i in range(2)]  # 3+3 > 4: separate batches
        big = b.submit([_rows(9, 9)])  # larger than max_batch_size: runs alone, unsplit
        gated.gate.set()
        assert blocker.result(5)[0].shape == (1, 8)
        for f in small:
            assert f.result(5)[0].shape == (3, 8)
        np.testing.assert_allclose(big.result(5)[0], mlp_reference(_rows(9, 9)), rtol=1e-5)
        assert b.stats().batch_sizes == {1: 1, 3: 2, 9: 1}


def test_incompatible_trailing_shapes_go_to_separate_batches() -> None:
    gated = GatedModel(_model(seq_onnx()))
    with Batcher(gated, 8, 50_000) as b:
        blocker = b.submit([np.ones((1, 3), np.float32)])
        assert gated.entered.wait(5)
        a = [b.submit([np.full((1, 3), i, np.float32)]) for i in range(3)]
        c = [b.submit([np.full((1, 5), i, np.float32)]) for i in range(2)]
        gated.gate.set()
        blocker.result(5)
        for i, f in enumerate(a):
            np.testing.assert_array_equal(f.result(5)[0], np.full((1, 3), 2 * i, np.float32))
        for i, f in enumerate(c):
            np.testing.assert_array_equal(f.result(5)[0], np.full((1, 5), 2 * i, np.float32))
        assert b.stats().batch_sizes == {1: 1, 3: 1, 2: 1}


def test_backend_error_reaches_every_request_of_the_batch() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 8, 50_000) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        gated.fail = BackendError("device lost")
        waiting = [b.submit([_rows(1)]) for _ in range(3)]
        gated.gate.set()
        for f in [blocker, *waiting]:
            with pytest.raises(BackendError, match="device lost"):
                f.result(5)


def test_close_drains_the_queue_then_refuses() -> None:
    gated = GatedModel(_model())
    b = Batcher(gated, 2, 0)
    blocker = b.submit([_rows(1)])
    assert gated.entered.wait(5)
    pending = [b.submit([_rows(1)]) for _ in range(3)]
    closer = threading.Thread(target=b.close)
    closer.start()
    gated.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    for f in [blocker, *pending]:
        assert f.result(0)[0].shape == (1, 8)
    with pytest.raises(NotReady, match="shutting down"):
        b.submit([_rows(1)])
    assert not _batch_threads("batcher-mlp")
    b.close()  # idempotent


def test_profile_caps_manifest_batching() -> None:
    assert capped(64, 10_000, BatchingCap(max_batch_size=16, max_queue_delay_us=2000)) == (
        16,
        2000,
    )
    assert capped(8, 500, BatchingCap()) == (8, 500)
    assert capped(64, 10_000, None) == (64, 10_000)
    with pytest.raises(ValueError, match="max_batch_size"):
        Batcher(_model(), 0, 100)


def test_several_workers_share_the_queue() -> None:
    with Batcher(_model(), 4, 2_000, workers=3) as b:
        inputs = [_rows(1 + i % 2, i) for i in range(60)]
        with ThreadPoolExecutor(16) as pool:
            outputs = list(
                pool.map(lambda x: b.infer([x], deadline=time.monotonic() + 10)[0], inputs)
            )
        assert b.stats().requests == 60
    for x, y in zip(inputs, outputs, strict=True):
        np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5)
    assert not _batch_threads("batcher-mlp")


def test_expired_requests_are_not_computed() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 8, 0) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)
        # due at once: it passes while queued behind the blocker, with no sleep to wait it out
        late = b.submit([_rows(1)], deadline=time.monotonic())
        fine = b.submit([_rows(1)], deadline=time.monotonic() + 30)
        gated.gate.set()
        blocker.result(5)
        with pytest.raises(DeadlineExceeded, match="deadline passed after"):
            late.result(5)
        assert fine.result(5)[0].shape == (1, 8)
        assert b.stats().requests == 2


def test_inputs_disagreeing_on_rows_are_a_client_mistake() -> None:
    # BadRequest (400), not BackendError: a client mistake must never go to the cloud.
    two = identity_model({"FP32": TensorProto.FLOAT, "INT32": TensorProto.INT32})
    with Batcher(_model(two), 8, 1000) as b:
        with pytest.raises(BadRequest, match="disagree on the batch dimension"):
            b.submit([np.zeros((2, 3), np.float32), np.zeros((3, 3), np.int32)])
        assert b.stats().requests == 0


def test_a_waiting_caller_returns_at_its_deadline() -> None:
    gated = GatedModel(_model())
    with Batcher(gated, 8, 0) as b:
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)  # the only batch thread is held inside the model
        with pytest.raises(DeadlineExceeded, match="waiting for the batch"):
            b.infer([_rows(1)], deadline=time.monotonic() + 0.2)
        assert b.pending_count() == 0  # it left the queue: it will never run
        gated.gate.set()
        blocker.result(5)
    assert gated.calls == 1


def test_a_queued_request_leaves_at_its_deadline_without_running() -> None:
    gated = GatedModel(_model())
    # Two dispatcher threads, one worker for the model: one thread is held by the blocker,
    # the other keeps scanning the queue (as the daemon's shared dispatcher does).
    with (
        BatchDispatcher(2, "expiry") as dispatcher,
        Batcher(gated, 8, 60_000_000, dispatcher=dispatcher) as b,  # a 60 s delay
    ):
        blocker = b.submit([_rows(1)])
        assert gated.entered.wait(5)  # the worker is busy: the next request queues
        late = b.submit([_rows(1)], deadline=time.monotonic() + 0.2)
        with pytest.raises(DeadlineExceeded, match="deadline passed after"):
            late.result(30)
        assert b.stats().expired == 1
        assert b.pending_count() == 0
        gated.gate.set()
        blocker.result(5)
    assert gated.calls == 1


def _slow_batcher(watchdog: Watchdog, iterations: int) -> tuple[Batcher, GatedModel]:
    """A slow model behind a blocker: the requests sent while it holds the only worker
    queue up and run as one batch once the gate opens."""
    options = LoadOptions(load_profile("generic-x86_64"), host=X86, watchdog=watchdog)
    model = create_backend("onnx").load(slow_model(iterations), ModelSpec("slow"), options)
    gated = GatedModel(model, first_only=True)
    return Batcher(gated, 8, 100_000), gated


def test_a_batch_is_stopped_once_every_request_in_it_gave_up() -> None:
    x = np.ones((1, 4), np.float32)
    with Watchdog() as dog:
        b, gated = _slow_batcher(dog, 1_000_000)
        with b:
            blocker = b.submit([x])
            assert gated.entered.wait(5)
            doomed = [b.submit([x], deadline=time.monotonic() + 0.3) for _ in range(2)]
            gated.gate.set()
            blocker.result(10)
            for f in doomed:
                with pytest.raises(DeadlineExceeded, match="run stopped at its deadline"):
                    f.result(60)
            assert dog.fired == 1
            assert b.stats().batch_sizes == {1: 1, 2: 1}  # one batch, stopped once


def test_one_patient_request_keeps_its_batch_running() -> None:
    x = np.ones((1, 4), np.float32)
    with Watchdog() as dog:
        b, gated = _slow_batcher(dog, 600)
        with b:
            blocker = b.submit([x])
            assert gated.entered.wait(5)
            hasty = b.submit([x], deadline=time.monotonic() + 0.05)
            patient = b.submit([x])
            gated.gate.set()
            blocker.result(10)
            np.testing.assert_array_equal(patient.result(120)[0], x)
            assert hasty.done()  # ran in the same batch (or left the queue at its deadline)
            assert dog.fired == 0


def test_many_batchers_share_one_bounded_dispatcher() -> None:
    before = threading.active_count()
    model = _model()
    with BatchDispatcher(2, "shared-batch") as dispatcher:
        batchers = [Batcher(model, 4, 1_000, dispatcher=dispatcher) for _ in range(64)]
        assert threading.active_count() == before + 2
        x = _rows(1)
        with ThreadPoolExecutor(16) as pool:
            outputs = list(
                pool.map(lambda b: b.infer([x], deadline=time.monotonic() + 60), batchers)
            )
        for out in outputs:
            np.testing.assert_allclose(out[0], mlp_reference(x), rtol=1e-5)
        for b in batchers:
            b.close()
    assert threading.active_count() == before


def test_close_that_gives_up_fails_what_is_still_queued() -> None:
    gated = GatedModel(_model())
    b = Batcher(gated, 1, 0)
    blocker = b.submit([_rows(1)])
    assert gated.entered.wait(5)
    stranded = b.submit([_rows(1)])
    b.close(timeout=0.1)  # the model never lets go within it
    with pytest.raises(NotReady, match="closed before it ran"):
        stranded.result(5)
    gated.gate.set()
    assert blocker.result(5)[0].shape == (1, 8)

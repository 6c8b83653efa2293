"""A guest on the event loop sees its batched models through `NowModels`: a call runs at once
on the loop's thread, or fails without waiting (and the run is then made on the pool)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.runtime.batching.gated import GatedModel
from tests.runtime.batching.test_batcher import _model, _rows
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.serving.guest_run import NowModels, WouldWait


class _Provider:
    def __init__(self, handle: Batcher) -> None:
        self.handle = handle

    def by_name(self, name: str) -> Batcher | None:
        return self.handle if name == self.handle.name else None

    def from_bytes(self, data: bytes, encoding: str, target: str) -> Batcher | None:
        return self.handle


def test_an_idle_batcher_runs_the_call_on_the_callers_thread() -> None:
    gated = GatedModel(_model())
    gated.gate.set()
    with Batcher(gated, 8, 500) as batcher:
        now = NowModels(_Provider(batcher))
        handle = now.by_name("mlp")
        assert handle is not None
        assert handle is not batcher
        x = _rows(1)
        out = handle.infer([x])
        assert np.allclose(out[0], gated.inner.infer([x])[0])
        assert gated.threads == [threading.current_thread().name]
        assert not now.waited
        assert now.by_name("other") is None


def test_a_busy_batcher_fails_the_call_at_once_and_says_so() -> None:
    # Another caller holds the batcher's one slot: the loop must not wait for it.
    gated = GatedModel(_model())
    with Batcher(gated, 8, 500) as batcher:
        other = threading.Thread(target=lambda: batcher.infer([_rows(1)]))
        other.start()
        assert gated.entered.wait(10)
        now = NowModels(_Provider(batcher))
        handle = now.from_bytes(b"", "onnx", "cpu")
        assert handle is not None
        with pytest.raises(WouldWait):
            handle.infer([_rows(1)])
        assert now.waited
        assert batcher.pending_count() == 0  # nothing was left queued behind
        gated.gate.set()
        other.join(10)
        assert gated.calls == 1

"""Model wrappers that hold a batch thread where a test needs it (real models inside)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from wasmgate.runtime.backends import LoadedModel
from wasmgate.runtime.backends.base import Array


class GatedModel(LoadedModel):
    """Wraps a real model; each infer waits for the gate (to hold the batch thread).

    ``first_only``: only the first call waits, and it answers zeros without running the
    inner model (a blocker in front of a model that would run for hours)."""

    def __init__(self, inner: LoadedModel, *, first_only: bool = False) -> None:
        super().__init__(
            name=inner.name,
            inputs=inner.inputs,
            outputs=inner.outputs,
            backend=inner.backend,
            providers=inner.providers,
            precision=inner.precision,
        )
        self.inner = inner
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: Exception | None = None
        self.calls = 0
        self.threads: list[str] = []
        self._first_only = first_only

    def _run(self, inputs: Sequence[Array], deadline: float | None) -> list[Array]:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        first = self.calls == 1
        self.entered.set()
        if first or not self._first_only:
            assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        if first and self._first_only:
            return [np.zeros_like(inputs[0]) for _ in self.outputs]
        return self.inner.infer(inputs, deadline=deadline)

    def close(self) -> None:
        self.inner.close()

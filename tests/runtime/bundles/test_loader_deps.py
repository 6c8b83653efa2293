"""`LoaderDeps.backend` makes one backend per format, however many bundles load at once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from wasmgate.runtime.bundles import loader
from wasmgate.runtime.bundles.loader import LoaderDeps


class _Backend:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_bundles_loading_at_once_share_one_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[_Backend] = []

    def slow_create(_fmt: str) -> Any:
        # Creating a backend takes a while (ONNX Runtime's import, its environment): the
        # window in which a second loader thread would make a second one.
        time.sleep(0.05)
        made.append(_Backend())
        return made[-1]

    monkeypatch.setattr(loader, "create_backend", slow_create)
    deps = LoaderDeps(engine=cast(Any, None), profile=cast(Any, None), limits=cast(Any, None))
    start = threading.Barrier(8)

    def load(_i: int) -> object:
        start.wait()
        return deps.backend("onnx")

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(load, range(8)))
    assert len(made) == 1
    assert all(backend is made[0] for backend in got)
    deps.close()
    assert made[0].closed == 1
    assert deps.backends == {}

"""`StartupGc`: the collector paused for ``wasmgate serve``'s start, resumed at READY."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wasmgate.runtime import cli, daemon
from wasmgate.runtime.ops.startgc import StartupGc


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()


def test_pause_then_resume_collects_the_cycles_made_meanwhile() -> None:
    window = StartupGc(paused=True)
    states = [(window.paused, gc.isenabled())]
    ref = weakref.ref(_Node())
    assert ref() is not None  # paused: nothing collects the cycle
    window.resume()
    assert ref() is None
    states.append((window.paused, gc.isenabled()))
    window.resume()  # idempotent
    states.append((window.paused, gc.isenabled()))
    assert states == [(True, False), (False, True), (False, True)]


def _failed_start() -> None:
    with StartupGc(paused=True):
        assert not gc.isenabled()
        raise RuntimeError("start-up failed")


def test_leaving_the_block_resumes_even_on_an_error() -> None:
    with pytest.raises(RuntimeError, match="start-up failed"):
        _failed_start()
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    gc.disable()
    window = StartupGc(paused=True)
    assert not window.paused
    window.resume()
    assert not gc.isenabled()


def test_serve_starts_paused_and_resumes_when_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "0")
    monkeypatch.setenv("WASMGATE_PATHS__DATA_DIR", str(tmp_path))
    seen: list[bool] = []

    async def fake_run(*_args: Any, on_ready: Callable[[], None] | None = None) -> int:
        seen.append(gc.isenabled())  # while starting
        assert on_ready is not None
        on_ready()  # READY=1 sent
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(daemon, "run_daemon", fake_run)
    assert cli.main(["serve"]) == 0
    assert seen == [False, True]

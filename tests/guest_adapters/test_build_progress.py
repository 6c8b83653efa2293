"""A long compile says how long it has run so far (the first Zig run builds wasi-libc for a
minute or more, which used to be a minute of silence)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasmgate.guest_adapters import build
from wasmgate.guest_adapters.examples import example_dir


def test_a_compile_reports_progress_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ticks far shorter than any real compile, so a warm (~1 s) build already shows them.
    monkeypatch.setattr(build, "_FIRST_TICK_S", 0.01)
    monkeypatch.setattr(build, "_TICK_S", 0.01)
    told: list[str] = []
    built = build.build_adapter(example_dir("digits"), cache_dir=tmp_path, progress=told.append)
    assert not built.cached
    assert told, "no progress during a compile"
    assert told[0].startswith("compiling adapter.c: ")
    assert "wasi-libc" in told[0]
    again: list[str] = []
    assert build.build_adapter(
        example_dir("digits"), cache_dir=tmp_path, progress=again.append
    ).cached
    assert again == []  # a cache hit compiles nothing and says nothing

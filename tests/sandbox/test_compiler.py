"""Compiling in a child process: a compile bomb is refused within its time or memory budget.

The bomb (`compile_bomb`, ~24 KiB) compiles for minutes in-process; with a budget the child
is killed and the module refused with the config key to raise. A good module compiled in
the child serves exactly like one compiled in-process, and through the same cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sandbox.helpers import compile_bomb
from wasmgate.sandbox import Ceilings, SandboxEngine, compiler
from wasmgate.sandbox.errors import AdapterLoadError
from wasmgate.sandbox.limits import MIB

BUDGET_S = 3.0
# Killing the child and reaping it; the budget is counted from the child's start.
KILL_SLACK_S = 5.0


def _engine(tmp_path: Path, timeout_s: float, memory_mb: int) -> SandboxEngine:
    ceilings = Ceilings(compile_timeout_s=timeout_s, compile_memory_bytes=memory_mb * MIB)
    return SandboxEngine(tmp_path / "cache", ceilings)


@pytest.mark.timeout(60)
def test_a_compile_bomb_is_refused_at_the_time_budget(tmp_path: Path) -> None:
    bomb = compile_bomb()
    assert 16 * 1024 <= len(bomb) <= 32 * 1024
    with _engine(tmp_path, BUDGET_S, 4096) as engine:
        start = time.monotonic()
        with pytest.raises(AdapterLoadError, match=r"longer than .*compile_timeout_s"):
            engine.compile(bomb, name="bomb")
        assert time.monotonic() - start < BUDGET_S + KILL_SLACK_S
        assert not list(engine.cache_dir.glob("*.cwasm"))  # nothing cached for it


@pytest.mark.timeout(120)
def test_a_compile_bomb_is_refused_at_the_memory_budget(tmp_path: Path) -> None:
    with (
        _engine(tmp_path, 100, 32) as engine,
        pytest.raises(AdapterLoadError, match=r"more than the budget of 32 MiB.*compile_memory_mb"),
    ):
        engine.compile(compile_bomb(), name="bomb")


def test_a_good_module_compiles_in_the_child_and_runs(
    tmp_path: Path, guest_wasm: Callable[[str], bytes]
) -> None:
    wasm = guest_wasm("affine_adapter")
    with _engine(tmp_path, 60, 256) as engine:
        adapter = engine.compile(wasm, name="affine")
        assert len(list(engine.cache_dir.glob("*.cwasm"))) == 1
        again = engine.compile(wasm, name="affine")  # from the cache: no child at all
        assert again.name == adapter.name


def test_invalid_wasm_names_the_problem(tmp_path: Path) -> None:
    with (
        _engine(tmp_path, 60, 256) as engine,
        pytest.raises(AdapterLoadError, match="bad: invalid wasm module"),
    ):
        engine.compile(b"\0asm\x01\0\0\0\x01\x05", name="bad")


def test_the_child_loads_wasmtime_only(tmp_path: Path) -> None:
    """The child is the compile's fixed cost on every install (each start-up bundle): it
    imports neither the package nor numpy (``-X importtime`` lists what it imported)."""
    settings = {"fuel": False, "stack": 512 * 1024, "reservation": 1 << 30}
    cmd = [sys.executable, "-X", "importtime", "-I", "-c", compiler._BOOT, str(compiler.CHILD)]  # noqa: SLF001
    done = subprocess.run(
        [*cmd, json.dumps(settings), str(64 * MIB)],
        input=b"\0asm\x01\0\0\0",  # the empty module
        capture_output=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    assert done.stdout  # a serialized module
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "wasmtime" in imported
    assert not {m for m in imported if m.startswith(("wasmgate", "numpy"))}

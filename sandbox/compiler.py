"""Compile wasm to native code in a child process with a time and a memory budget.

Cranelift's compile time is superlinear in some shapes of code: a few KiB of nested loops
with many live locals compile for seconds to minutes, in one uninterruptible native call.
Run in-process, such a module would hold a thread (and the install path) for as long as it
likes and could grow the daemon's memory without limit. Here the compile runs in a fresh
Python process running ``compile_child.py`` (by path: it imports only the standard library
and wasmtime, ~0.1 s, where ``-m`` would import the package and numpy first, ~0.5 s of every
compile) that sets its own ``RLIMIT_DATA`` before it reads the module; the parent kills it
when the time budget is spent. The child writes the serialized module
(``wasmtime.Module.serialize``) to stdout; the parent stores it in the engine's private
cache and deserializes it with an engine of identical settings.

Child protocol: argv[1] is the JSON engine settings (`engine_config`), argv[2] the memory
budget in bytes; stdin the wasm; exit 0 with the artifact on stdout, 2 with the wasmtime
message on stderr for an invalid module, 3 when the memory budget ran out.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from wasmgate.sandbox.compile_child import (
    BASE_DATA_BYTES,
    INVALID,
    OUT_OF_MEMORY,
    engine_config,
)
from wasmgate.sandbox.errors import AdapterLoadError

__all__ = ["BASE_DATA_BYTES", "CompileBudget", "compile_in_child", "engine_config"]

# The child: a file run by path, not ``-m`` (which imports the package and numpy first).
CHILD = Path(__file__).with_name("compile_child.py")
# ``-I``: no user site, no PYTHON* variables and no script or working directory on sys.path,
# so nothing beside the child can shadow what it imports.
_BOOT = "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')"


class CompileBudget(msgspec.Struct, frozen=True):
    """Wall-clock seconds and memory bytes one module's compile may take."""

    timeout_s: float
    memory_bytes: int


def compile_in_child(
    wasm: bytes, settings: dict[str, Any], budget: CompileBudget, name: str
) -> bytes:
    """The serialized native module for ``wasm``; ``AdapterLoadError`` if over budget/invalid."""
    cmd = [sys.executable, "-I", "-c", _BOOT, str(CHILD)]
    cmd += [json.dumps(settings), str(budget.memory_bytes)]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(wasm, timeout=budget.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AdapterLoadError(
            f"{name}: compiling took longer than the budget of {budget.timeout_s:g} s "
            "(limits.compile_timeout_s); the module is refused"
        ) from None
    if proc.returncode == 0:
        return out
    message = err.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode == INVALID:
        raise AdapterLoadError(f"{name}: invalid wasm module: {message[0] if message else '?'}")
    if proc.returncode in (OUT_OF_MEMORY, -signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV):
        mib = budget.memory_bytes // (1024 * 1024)
        raise AdapterLoadError(
            f"{name}: compiling needs more than the budget of {mib} MiB "
            "(limits.compile_memory_mb); the module is refused"
        )
    last = message[-1] if message else f"exit status {proc.returncode}"
    raise AdapterLoadError(f"{name}: the compiler process failed: {last}")

"""The child side of `wasmgate.sandbox.compiler`, run by path (``python -I -c <boot>
compile_child.py SETTINGS BYTES``), never as a module of the package.

It imports the standard library and wasmtime only: nothing of ``wasmgate`` (whose sandbox
package brings numpy and the host API, ~0.4 s of every compile's start). It caps its own
data size first, then reads the wasm. The engine settings (`engine_config`) live here so
that the daemon's engine and the child's are built by the same code: a serialized module
only deserializes into an engine with the same settings.

Invariant: nothing here may import ``wasmgate`` (the child has no package on its path).
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import wasmtime

INVALID = 2
OUT_OF_MEMORY = 3
# What the child itself needs before it compiles anything (interpreter, wasmtime).
BASE_DATA_BYTES = 256 * 1024 * 1024


def engine_config(settings: dict[str, Any]) -> wasmtime.Config:
    """The wasmtime config for ``settings`` (the same in the daemon and the child).

    A serialized module only deserializes into an engine with the same settings, so both
    sides build their engine here.
    """
    cfg = wasmtime.Config()
    cfg.epoch_interruption = True
    cfg.consume_fuel = bool(settings["fuel"])
    cfg.max_wasm_stack = int(settings["stack"])
    cfg.memory_reservation = int(settings["reservation"])
    cfg.memory_guard_size = 64 * 1024
    cfg.wasm_threads = False
    cfg.cranelift_opt_level = "speed"
    return cfg


def main(settings_json: str, memory_bytes: int) -> int:
    limit = BASE_DATA_BYTES + memory_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    engine = wasmtime.Engine(engine_config(json.loads(settings_json)))
    wasm = sys.stdin.buffer.read()
    try:
        blob = wasmtime.Module(engine, wasm).serialize()
    except wasmtime.WasmtimeError as e:
        sys.stderr.write(str(e).strip() or type(e).__name__)
        return INVALID
    except MemoryError:
        return OUT_OF_MEMORY
    sys.stdout.buffer.write(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))

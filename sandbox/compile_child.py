"""The child side of `wasmgate.sandbox.compiler`: ``python -m wasmgate.sandbox.compile_child``.

Kept apart from ``compiler`` so that running it as ``__main__`` does not re-import a module
the package already loaded. It caps its own data size first, then reads the wasm.
"""

from __future__ import annotations

import json
import resource
import sys

import wasmtime

from wasmgate.sandbox.compiler import BASE_DATA_BYTES, INVALID, OUT_OF_MEMORY, engine_config


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

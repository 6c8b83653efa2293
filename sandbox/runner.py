"""The WasmEdge-style command runner behind ``wasmgate run-guest``.

Runs a WASI *command* module (``_start``) the way ``wasmedge --dir .:. --nn-preload
default:ONNX:CPU:model.onnx guest.wasm args…`` does, so guests written for WasmEdge's or
wasmtime's wasi-nn run unmodified.

Invariants:
- Only the directories named with ``--dir`` are visible (preopened at their guest path,
  read-only with ``:ro``); only ``--env`` variables exist; argv is the guest's file name
  followed by the given arguments. stdin/stdout/stderr are the terminal's.
- The guest may import WASI preview1 and ``wasi_ephemeral_nn`` only; anything else fails
  before it runs with ``AdapterLoadError`` naming the import.
- Models come from the ``ModelProvider`` given (``--nn-preload`` names, or raw bytes the
  guest passes to ``load``); the runner itself never parses model files.
- The exit code is the guest's ``proc_exit`` code (0 when ``_start`` returns); a trap is
  raised as ``GuestTrap``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

from wasmgate.sandbox.errors import AdapterLoadError, SandboxError
from wasmgate.sandbox.host_api import RequestState
from wasmgate.sandbox.limits import GuestLimits
from wasmgate.sandbox.models import ModelProvider
from wasmgate.sandbox.rawcall import CallbackKeeper
from wasmgate.sandbox.traps import translate
from wasmgate.sandbox.wasi import WASI_FUNCTIONS
from wasmgate.sandbox.wasi_nn import NN_FUNCTIONS, NN_MODULE, NnSession, define_wasi_nn

__all__ = ["DirMapping", "GuestRunner", "NnPreload"]

ENCODING_NAMES = {"onnx": "onnx", "tensorflowlite": "tensorflowlite", "tflite": "tensorflowlite"}
TARGET_NAMES = {"cpu", "gpu", "tpu", "auto"}


@dataclass(frozen=True)
class DirMapping:
    """``--dir HOST:GUEST[:ro]`` (``HOST`` alone maps the directory to the same path)."""

    host: Path
    guest: str
    read_only: bool = False

    @classmethod
    def parse(cls, text: str) -> DirMapping:
        """Parse ``HOST[:GUEST][:ro]``; ``ValueError`` with the reason if malformed."""
        parts = text.split(":")
        read_only = len(parts) > 1 and parts[-1] == "ro"
        if read_only:
            parts = parts[:-1]
        if not 1 <= len(parts) <= 2 or not parts[0]:
            raise ValueError(f"--dir {text!r}: expected HOST:GUEST[:ro]")
        host = Path(parts[0])
        if not host.is_dir():
            raise ValueError(f"--dir {text!r}: {host} is not a directory")
        return cls(host, parts[1] if len(parts) == 2 and parts[1] else parts[0], read_only)


@dataclass(frozen=True)
class NnPreload:
    """``--nn-preload NAME:ENCODING:TARGET:PATH`` (encoding/target case-insensitive)."""

    name: str
    encoding: str
    target: str
    path: Path

    @classmethod
    def parse(cls, text: str) -> NnPreload:
        """Parse the WasmEdge syntax; ``ValueError`` naming what is wrong."""
        parts = text.split(":", 3)
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"--nn-preload {text!r}: expected NAME:ENCODING:TARGET:PATH")
        name, enc, target, path = parts
        encoding = ENCODING_NAMES.get(enc.lower())
        if encoding is None:
            raise ValueError(
                f"--nn-preload {text!r}: encoding {enc!r} is not onnx or tensorflowlite"
            )
        if target.lower() not in TARGET_NAMES:
            raise ValueError(
                f"--nn-preload {text!r}: target {target!r} is not cpu, gpu, tpu or auto"
            )
        return cls(name, encoding, target.lower(), Path(path))


_ADAPTER_HINT = (
    "this is a wasmgate adapter (a reactor module using the `wasmgate` host API), not a WASI "
    "command module: run it with `wasmgate adapter test ADAPTER.wasm|DIR`"
)


@dataclass
class GuestRunner:
    """Runs one WASI command module with wasi-nn; ``run`` returns the guest's exit code."""

    models: ModelProvider
    dirs: Sequence[DirMapping] = ()
    env: Sequence[tuple[str, str]] = ()
    args: Sequence[str] = ()
    log: list[str] = field(default_factory=list)

    def run(self, wasm: bytes, argv0: str = "guest.wasm") -> int:
        """Compile, link and run ``_start``; raises ``AdapterLoadError`` / ``GuestTrap``."""
        engine = wasmtime.Engine()
        module = self._module(engine, wasm)
        store = wasmtime.Store(engine)
        store.set_wasi(self._wasi(argv0))
        session = NnSession(self.models, self._warn)
        linker = wasmtime.Linker(engine)
        linker.define_wasi()
        keeper = CallbackKeeper()
        define_wasi_nn(linker, keeper, lambda: session)
        req = RequestState({}, GuestLimits(deadline_s=float("inf")), deadline=float("inf"))
        try:
            instance = linker.instantiate(store, module)
            start = instance.exports(store)["_start"]
            assert isinstance(start, wasmtime.Func)  # noqa: S101 - checked in _module
            start(store)
        except wasmtime.ExitTrap as e:
            return int(e.code)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as e:
            req.logs = self.log
            raise translate(e, req, near_memory_limit=False) from e
        return 0

    def _warn(self, line: str) -> None:
        self.log.append(line)

    def _module(self, engine: wasmtime.Engine, wasm: bytes) -> wasmtime.Module:
        try:
            module = wasmtime.Module(engine, wasm)
        except wasmtime.WasmtimeError as e:
            raise AdapterLoadError(f"invalid wasm module: {str(e).strip()[:300]}") from e
        known = {"wasi_snapshot_preview1": WASI_FUNCTIONS, NN_MODULE: frozenset(NN_FUNCTIONS)}
        exports = {e.name for e in module.exports if isinstance(e.type, wasmtime.FuncType)}
        if "wasmgate_handle" in exports or any(i.module == "wasmgate" for i in module.imports):
            raise AdapterLoadError(_ADAPTER_HINT)
        for imp in module.imports:
            if imp.name not in known.get(imp.module, frozenset()):
                raise AdapterLoadError(f"guest needs unsupported import `{imp.module}::{imp.name}`")
        if "_start" not in exports:
            raise AdapterLoadError("not a WASI command module (no `_start` export)")
        return module

    def _wasi(self, argv0: str) -> wasmtime.WasiConfig:
        cfg = wasmtime.WasiConfig()
        cfg.argv = [argv0, *self.args]
        cfg.env = [list(kv) for kv in self.env]
        cfg.inherit_stdin()
        cfg.inherit_stdout()
        cfg.inherit_stderr()
        for d in self.dirs:
            try:
                cfg.preopen_dir(str(d.host), d.guest, fs_mutable=not d.read_only)
            except wasmtime.WasmtimeError as e:
                raise SandboxError(f"cannot preopen {d.host} as {d.guest}: {e}") from e
        return cfg

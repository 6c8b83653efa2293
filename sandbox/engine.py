"""The daemon's one wasmtime engine: epoch ticker, compile, precompiled-module cache.

Invariants:
- One ``wasmtime.Engine`` per ``SandboxEngine``, built with epoch interruption (and fuel
  when ``Ceilings.fuel_enabled``), a bounded wasm stack and a lowered memory reservation
  (so many instances fit in the address space).
- One epoch ticker (`wasmgate.sandbox.epoch`): the epoch advances with wall-clock time while
  guest code runs, and deadlines (`deadline_ticks`) count from the time the current epoch
  stands for, so a ticker running late on a loaded machine neither stretches a deadline
  nor fires one early. ``close()`` stops and joins it.
- One background thread (`wasmgate.sandbox.background`, started on first use) builds the
  adapters' spare instances and closes used stores off the request path; ``close()`` stops
  it too. Each adapter owns (and closes) its spares.
- ``Module.deserialize`` runs native code, so it is only ever called on entries this
  daemon wrote into its private cache directory (0700) and that carry its MAC over the
  wasm's sha256 *as hashed here* and the fingerprint of the engine settings and wasmtime
  version (`wasmgate.signing.derived`); an edited entry is refused, logged and recompiled.
  Bundle bytes are never deserialized.
- A module is compiled from validated wasm binaries only (WAT text and components refused),
  in a child process under a time and memory budget when ``Ceilings.compile_timeout_s`` is
  set (`wasmgate.sandbox.compiler`); its serialized output goes through the same cache.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Collection
from contextlib import AbstractContextManager
from importlib.metadata import version
from pathlib import Path
from types import TracebackType

import msgspec
import wasmtime

from wasmgate._compat import Self
from wasmgate.sandbox import _wasmtime_private
from wasmgate.sandbox.adapter import Adapter
from wasmgate.sandbox.background import Background
from wasmgate.sandbox.compiler import CompileBudget, compile_in_child, engine_config
from wasmgate.sandbox.epoch import EpochTicker
from wasmgate.sandbox.errors import AdapterLoadError, SandboxError
from wasmgate.sandbox.limits import MIB, Ceilings

__all__ = ["SandboxEngine"]

_WASM_MAGIC = b"\0asm"
_CORE_VERSION = b"\x01\x00\x00\x00"


class SandboxEngine:
    """One per daemon: owns the wasmtime engine, the epoch ticker thread and the module cache."""

    def __init__(self, cache_dir: Path, ceilings: Ceilings | None = None) -> None:
        """Create the engine and start the ticker; ``cache_dir`` is created private (0700).

        Refuses (`SandboxError`) a wasmtime-py outside the supported range first."""
        _wasmtime_private.check_wasmtime()
        self.ceilings = ceilings or Ceilings()
        self.cache_dir = Path(cache_dir)
        # Imported here: the backends import this package where PyNaCl may be missing
        # (the arm64 probe under qemu); only an engine needs wasmgate.signing.
        from wasmgate.signing.derived import DerivedCache  # noqa: PLC0415
        from wasmgate.signing.errors import SigningError  # noqa: PLC0415

        try:
            self._cache = DerivedCache(self.cache_dir)
        except SigningError as e:
            raise SandboxError(f"module cache: {e}") from e
        # Fixed for the engine's life: later ceilings (a reload) never change how modules
        # compile, so the child compiler and the cache keep matching this engine.
        self._engine_settings = settings = self._settings()
        self.fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
        self.engine = wasmtime.Engine(self._config())
        self.background = Background("wasmgate-spares")
        """Off-request-path work: spare instances, closing used stores."""
        self.epoch = EpochTicker(self.engine, self.ceilings.tick_s)

    def _settings(self) -> dict[str, object]:
        c = self.ceilings
        return {
            "wasmtime": version("wasmtime"),
            "machine": platform.machine(),
            "fuel": c.fuel_enabled,
            "stack": c.max_wasm_stack,
            "reservation": self._reservation(),
            "epoch": True,
        }

    def _reservation(self) -> int:
        return max(64 * MIB, self.ceilings.memory_bytes)

    def _config(self) -> wasmtime.Config:
        return engine_config(self._engine_settings)

    @property
    def ticks(self) -> int:
        """Epoch increments so far (observability: an idle engine does not tick)."""
        return self.epoch.ticks

    def guest_running(self) -> AbstractContextManager[None]:
        """Hold around any guest code (instantiation, calls): the epoch ticks meanwhile."""
        return self.epoch.running

    def deadline_ticks(self, seconds: float) -> int:
        """The epoch deadline (ticks from now) of a run that may take ``seconds``."""
        return self.epoch.deadline_ticks(seconds)

    def arm(self, store: wasmtime.Store, seconds: float) -> None:
        """(Re)start ``store``'s epoch deadline: ``seconds`` from now (`deadline_ticks`)."""
        store.set_epoch_deadline(self.epoch.deadline_ticks(seconds))

    def compile(self, wasm: bytes, sha256: str | None = None, *, name: str = "adapter") -> Adapter:
        """Validate ``wasm`` as a daemon adapter (imports, exports, ABI version) and return it.

        ``sha256`` (hex), if given, must match the bytes. Uses the private precompiled cache.
        Raises ``AdapterLoadError`` naming what is wrong.
        """
        module = self.load_module(wasm, sha256, name=name)
        return Adapter(self, module, name=name)

    def load_module(
        self, wasm: bytes, sha256: str | None = None, *, name: str = "module"
    ) -> wasmtime.Module:
        """Compile (or load from the private cache) a core wasm module; no ABI checks."""
        if self.epoch.closed:
            raise SandboxError("sandbox engine is closed")
        _check_binary(wasm, self.ceilings.max_module_bytes, name)
        digest = hashlib.sha256(wasm).hexdigest()
        if sha256 is not None and sha256.lower() != digest:
            raise AdapterLoadError(f"{name}: sha256 mismatch (expected {sha256}, got {digest})")
        entry = self._cache_path(digest).name
        # In memory, not deserialize_file: that mmaps the file, and a file changed in place
        # later would corrupt live code (SIGBUS). The cache returns only what this daemon
        # compiled from these verified bytes with this engine (its MAC, signing/derived.py).
        cached = self._cache.load(entry, digest, self.fingerprint)
        if cached is not None:
            try:
                return wasmtime.Module.deserialize(self.engine, cached)
            except wasmtime.WasmtimeError:
                pass  # our own entry, but from another wasmtime build: recompile below
        c = self.ceilings
        if c.compile_timeout_s is not None:
            budget = CompileBudget(c.compile_timeout_s, c.compile_memory_bytes)
            blob = compile_in_child(wasm, self._engine_settings, budget, name)
            self._cache.store(entry, digest, self.fingerprint, blob)
            return wasmtime.Module.deserialize(self.engine, blob)  # our own child's output
        try:
            module = wasmtime.Module(self.engine, wasm)
        except wasmtime.WasmtimeError as e:
            raise AdapterLoadError(f"{name}: invalid wasm module: {_first_line(e)}") from e
        self._cache.store(entry, digest, self.fingerprint, module.serialize())
        return module

    def apply_ceilings(self, new: Ceilings) -> None:
        """New per-request ceilings (memory, output, log, fuel, deadline, module size, compile
        budget) for every later run and compile: a config reload applies them at once. The
        engine-level settings (fuel metering, wasm stack, epoch tick) keep their values."""
        old = self.ceilings
        self.ceilings = msgspec.structs.replace(
            new, fuel_enabled=old.fuel_enabled, max_wasm_stack=old.max_wasm_stack, tick_s=old.tick_s
        )

    def _cache_path(self, digest: str) -> Path:
        return self.cache_dir / f"{digest}-{self.fingerprint[:32]}.cwasm"

    def prune(self, keep: Collection[str]) -> int:
        """Delete cached modules except those of the wasm digests ``keep`` (this engine's
        settings): entries of removed bundles, older engines, interrupted writes. Returns
        how many files went. A compile running meanwhile for a bundle not yet installed may
        lose its fresh entry or its write: that only costs a recompile at the next start."""
        wanted = {self._cache_path(d.lower()).name for d in keep}
        removed = 0
        for entry in self.cache_dir.iterdir():
            if entry.suffix in {".cwasm", ".tmp"} and entry.name not in wanted:
                entry.unlink(missing_ok=True)
                removed += 1
        return removed

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until the background thread is idle (spares built, stores closed); False on
        timeout. For benchmarks and tests: requests never wait for it."""
        return self.background.settle(timeout_s)

    def close(self) -> None:
        """Stop the ticker and background threads (idempotent). Running guests then hit their
        deadline checks."""
        self.background.close()
        self.epoch.close()

    def __enter__(self) -> Self:
        """Context manager: ``close()`` on exit."""
        return self

    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the engine."""
        self.close()


def _check_binary(wasm: bytes, max_bytes: int, name: str) -> None:
    if len(wasm) > max_bytes:
        raise AdapterLoadError(
            f"{name}: module is {len(wasm)} bytes, limit is {max_bytes} (limits.max_module_bytes)"
        )
    if wasm[:4] != _WASM_MAGIC:
        raise AdapterLoadError(f"{name}: not a wasm binary (no \\0asm magic)")
    if wasm[4:8] != _CORE_VERSION:
        raise AdapterLoadError(
            f"{name}: not a core wasm module (version bytes {wasm[4:8].hex()}; "
            "components are not supported)"
        )


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__

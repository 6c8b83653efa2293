"""wasmgate.sandbox: the wasmtime sandbox, Guest ABI v1, wasi-nn host and run-guest runner.

Invariants (details in each module's docstring):
- Guests see only restricted WASI preview1, ``wasi_ephemeral_nn`` and ``wasmgate``; any other
  import fails at load time with an ``AdapterLoadError`` naming it.
- Every request runs under memory/table/deadline (and optional fuel) limits capped by the
  daemon's ``Ceilings``, in an instance nobody used before unless the adapter is explicitly
  pooled (usually a spare made ready off the request path: `wasmgate.sandbox.spares`).
- Precompiled native code is only ever loaded from the engine's private cache directory.
- This package never imports ``wasmgate.runtime``: models arrive through ``ModelProvider``.

Using it from the daemon::

    engine = SandboxEngine(cache_dir, Ceilings(...))        # one per process; close() at exit
    adapter = engine.compile(wasm, sha256, name=bundle).with_mode(manifest.adapter.mode)
    limits = GuestLimits.from_manifest(manifest.limits, engine.ceilings, deadline_s=left)
    result = adapter.run(payload, meta, provider, limits)   # on a worker thread
    adapter.close()                                          # unloaded: its spares go

- ``run`` blocks for at most about ``limits.deadline_s`` plus one epoch tick, *except* while
  the guest is inside a host call: wasi-nn ``compute`` hands the request's deadline to
  ``ModelHandle.infer``, which stops the run at it where the backend can (ONNX Runtime) and
  never starts one past it; an uncancellable backend (LiteRT) finishes its run first. Call
  it from worker threads, never the event loop; one adapter serves any number of threads
  at once (wasm releases the GIL).
- Errors: ``AdapterLoadError`` from ``compile``; from ``run`` a ``GuestTrap`` whose
  ``cause`` says what happened (``GuestDeadlineExceeded`` = ``deadline``,
  ``GuestResourceExhausted`` = ``memory``/``table``/``fuel``, ``GuestOutputTooLarge`` =
  ``output``; also ``unreachable``, ``stack``, ``oob``, ``exit``, ``abi``, ``host``, ...),
  with ``.logs``; ``SandboxError`` for misuse (fuel limit on a fuel-less engine, closed
  engine). Status 1/2 from the guest is *not* an exception: see ``GuestResult.status``.
- ``GuestResult.infer_s`` is the time spent inside ``ModelHandle.infer``; sandbox time is
  ``instantiate_s + run_s - infer_s`` (``from_spare``: the instance was ready beforehand).
- ``SandboxEngine.settle()`` waits for the background thread (spares, closing used stores):
  for tests and benchmarks; requests never wait for it.
"""

from typing import TYPE_CHECKING, Any

from wasmgate.sandbox.adapter import ABI_VERSION, Adapter, GuestResult, NoModels
from wasmgate.sandbox.engine import SandboxEngine
from wasmgate.sandbox.errors import (
    AdapterLoadError,
    GuestDeadlineExceeded,
    GuestOutputTooLarge,
    GuestResourceExhausted,
    GuestTrap,
    SandboxError,
)
from wasmgate.sandbox.limits import Ceilings, GuestLimits
from wasmgate.sandbox.models import ModelHandle, ModelProvider, TensorSpec

if TYPE_CHECKING:
    from wasmgate.sandbox.runner import DirMapping, GuestRunner, NnPreload

_RUNNER = frozenset({"DirMapping", "GuestRunner", "NnPreload"})


def __getattr__(name: str) -> Any:
    """The run-guest runner's names, imported on first use: the daemon never runs one and
    its module cost ~1.5 ms of every start."""
    if name in _RUNNER:
        from wasmgate.sandbox import runner  # noqa: PLC0415

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ABI_VERSION",
    "Adapter",
    "AdapterLoadError",
    "Ceilings",
    "DirMapping",
    "GuestDeadlineExceeded",
    "GuestLimits",
    "GuestOutputTooLarge",
    "GuestResourceExhausted",
    "GuestResult",
    "GuestRunner",
    "GuestTrap",
    "ModelHandle",
    "ModelProvider",
    "NnPreload",
    "NoModels",
    "SandboxEngine",
    "SandboxError",
    "TensorSpec",
]

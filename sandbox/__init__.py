"""wasmgate.sandbox: the wasmtime sandbox, Guest ABI v1, wasi-nn host and run-guest runner.

Invariants (details in each module's docstring):
- Guests see only restricted WASI preview1, ``wasi_ephemeral_nn`` and ``wasmgate``; any other
  import fails at load time with an ``AdapterLoadError`` naming it.
- Every request runs under memory/table/deadline (and optional fuel) limits capped by the
  daemon's ``Ceilings``, in a fresh instance unless the adapter is explicitly pooled.
- Precompiled native code is only ever loaded from the engine's private cache directory.
- This package never imports ``wasmgate.runtime``: models arrive through ``ModelProvider``.
"""

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
from wasmgate.sandbox.runner import DirMapping, GuestRunner, NnPreload

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

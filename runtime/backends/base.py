"""The backend interface: bytes in, a thread-safe `LoadedModel` out.

A backend never opens a path a model names: it gets the verified model bytes (re-hashed by
the bundle store right before the call) and settings derived from the device profile. The
daemon passes them as the store's `VerifiedBlob`, whose SHA-256 was computed from those very
bytes, so a backend keying a derived cache by the model's digest need not hash it again;
plain ``bytes`` (the CLI, tests) are hashed by the backend when it needs their digest.
"""

from __future__ import annotations

import platform
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy.typing as npt

from wasmgate.device_profiles import DeviceProfile, Precision, read_facts
from wasmgate.runtime.backends.watchdog import Watchdog
from wasmgate.runtime.backends.weight_share import WeightShare
from wasmgate.runtime.errors import BackendError, DeadlineExceeded
from wasmgate.sandbox.models import TensorSpec
from wasmgate.sandbox.spans import span

if TYPE_CHECKING:  # at run time the backends do not need PyNaCl (wasmgate.signing)
    from wasmgate.signing.records import VerifiedBlob

Array = npt.NDArray[Any]


def model_bytes(data: bytes | VerifiedBlob) -> tuple[bytes, str | None]:
    """The model's bytes and, when the store just verified them, their SHA-256 (else None)."""
    if isinstance(data, bytes):
        return data, None
    return data.data, data.sha256


class HostInfo(msgspec.Struct, frozen=True):
    """The CPU the backend runs on (injectable so tests can pose as another host)."""

    machine: str
    system: str
    cpu_flags: frozenset[str]

    @classmethod
    def current(cls) -> HostInfo:
        facts = read_facts()
        machine = facts.arch or platform.machine().lower()
        return cls(machine=machine, system=platform.system(), cpu_flags=facts.cpu_flags)

    @property
    def bf16_fastmath(self) -> bool:
        """ORT's BF16 fast-math GEMM exists only in ARM64 Linux builds on FEAT_BF16 CPUs."""
        return self.machine == "aarch64" and self.system == "Linux" and "bf16" in self.cpu_flags


class ModelSpec(msgspec.Struct, frozen=True):
    """What the manifest says about a model; the declared signature is checked at load."""

    name: str
    inputs: Sequence[TensorSpec] | None = None
    outputs: Sequence[TensorSpec] | None = None


class LoadOptions(msgspec.Struct, frozen=True):
    """How to load: the device profile, the precision to realise, and where to cache.

    ``raw_quantized_io`` keeps a full-integer TFLite model's int8/uint8 I/O tensors as they
    are (what WasmEdge-style guests of ``run-guest`` feed); the daemon keeps a float interface.
    """

    profile: DeviceProfile
    precision: Precision = "fp32"
    cache_dir: Path | None = None
    host: HostInfo | None = None
    raw_quantized_io: bool = False
    watchdog: Watchdog | None = None
    """Stops runs at their deadline (backends that can); None = runs are never stopped."""
    weights: WeightShare | None = None
    """The gateway's shared model weights (`wasmgate.runtime.backends.weight_share`), with
    ``[workers] count`` > 1; None: each model's weights are this process's own."""

    def resolved_host(self) -> HostInfo:
        return self.host if self.host is not None else HostInfo.current()


@dataclass(eq=False)  # identity semantics: models are dict keys in the daemon
class LoadedModel(ABC):
    """A model ready to run. Satisfies `wasmgate.sandbox.models.ModelHandle`.

    ``providers`` lists what really runs it (ORT providers after session creation, or the
    TFLite delegate/``XNNPACK``), ``precision`` the realised precision, ``notes`` every
    fallback taken and why.
    """

    name: str
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]
    backend: str
    providers: tuple[str, ...]
    precision: Precision
    notes: list[str] = field(default_factory=list)
    placement: str = ""
    """Where the nodes really run, per EP with its share (ONNX Runtime's graph assignment);
    empty where the backend cannot tell."""

    @property
    def dynamic_batch(self) -> bool:
        """True when every input and output has a dynamic first dimension."""
        specs = [*self.inputs, *self.outputs]
        return bool(specs) and all(s.shape[:1] == (-1,) for s in specs)

    def infer(self, inputs: Sequence[Array], *, deadline: float | None = None) -> list[Array]:
        """Run once on validated inputs (spec order); blocking and thread-safe.

        A run that has not started by ``deadline`` never starts; a running one is stopped
        at it when the backend can (`DeadlineExceeded` either way).
        """
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(f"{self.name}: deadline passed before the run started")
        with span("backend", lambda: self._span_attributes(inputs)):
            return self._run(inputs, deadline)

    def _span_attributes(self, inputs: Sequence[Array]) -> dict[str, str | int]:
        rows = int(inputs[0].shape[0]) if inputs and inputs[0].ndim else 1
        return {
            "wasmgate.model": self.name,
            "wasmgate.backend": self.backend,
            "wasmgate.provider": ",".join(self.providers),
            "wasmgate.precision": str(self.precision),
            "wasmgate.rows": rows,
        }

    @abstractmethod
    def _run(self, inputs: Sequence[Array], deadline: float | None) -> list[Array]:
        """The backend's run (``deadline``: when to stop it, if it can be stopped)."""

    @abstractmethod
    def close(self) -> None:
        """Release native resources; later `infer` calls raise `BackendError`."""


class InferenceBackend(ABC):
    """Creates `LoadedModel`s of one format (``type_key``: ``onnx`` or ``tflite``)."""

    type_key: str

    @abstractmethod
    def load(
        self, data: bytes | VerifiedBlob, spec: ModelSpec, options: LoadOptions
    ) -> LoadedModel:
        """Load verified model bytes; `BackendError` (chained) when it cannot."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release backend-wide resources (shared allocators, delegates)."""


def check_declared(
    model: str, kind: str, declared: Sequence[TensorSpec] | None, actual: Sequence[TensorSpec]
) -> None:
    """The manifest's signature must match the model's (names, datatypes, compatible shapes)."""
    if declared is None:
        return
    if [d.name for d in declared] != [a.name for a in actual]:
        raise BackendError(
            f"{model}: manifest {kind} {[d.name for d in declared]} do not match the model's "
            f"{[a.name for a in actual]}"
        )
    for d, a in zip(declared, actual, strict=True):
        if d.datatype != a.datatype or len(d.shape) != len(a.shape):
            raise BackendError(
                f"{model}: {kind[:-1]} {d.name!r} declared {d.datatype}{list(d.shape)}, "
                f"model has {a.datatype}{list(a.shape)}"
            )
        for ds, as_ in zip(d.shape, a.shape, strict=True):
            if -1 not in (ds, as_) and ds != as_:
                raise BackendError(
                    f"{model}: {kind[:-1]} {d.name!r} declared shape {list(d.shape)}, "
                    f"model has {list(a.shape)}"
                )

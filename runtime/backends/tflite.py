"""TFLite backend on LiteRT (`ai_edge_litert`), with `tflite_runtime` as an optional fallback.

Delegates come from the device profile and are tried in order; when none loads (library
missing, ABI mismatch, model rejected) the interpreter runs on its built-in XNNPACK/CPU path
and the reason is recorded in ``notes``. Full-integer models keep a float interface: inputs
are quantized and outputs dequantized with each tensor's (scale, zero_point), so an ``int8``
variant is a drop-in replacement for the ``fp32`` one (unless ``raw_quantized_io`` asks for
the model's own integer tensors, as WasmEdge gives them to guests). Interpreters are not
thread-safe: every call holds the model's lock.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from wasmgate.device_profiles.schema import TfliteSettings
from wasmgate.runtime.backends.base import (
    Array,
    InferenceBackend,
    LoadedModel,
    LoadOptions,
    ModelSpec,
    check_declared,
    model_bytes,
)
from wasmgate.runtime.errors import BackendError, DeadlineExceeded
from wasmgate.sandbox.models import TensorSpec, datatype_of

if TYPE_CHECKING:
    from wasmgate.signing.records import VerifiedBlob

log = logging.getLogger(__name__)

CPU_PATH = "XNNPACK/CPU"


@dataclass(frozen=True)
class _Io:
    index: int
    spec: TensorSpec
    raw: np.dtype[Any]
    scale: float
    zero_point: int

    @property
    def quantized(self) -> bool:
        return self.scale != 0.0 and self.raw.kind in "iu"

    @property
    def bounds(self) -> tuple[int, int]:
        info = np.iinfo(self.raw)
        return int(info.min), int(info.max)


def import_runtime() -> tuple[Any, Callable[..., Any], str]:
    """(Interpreter class, load_delegate, package name); ImportError when neither exists."""
    try:
        from ai_edge_litert.interpreter import Interpreter, load_delegate  # noqa: PLC0415
    except ImportError:
        from tflite_runtime.interpreter import (  # noqa: PLC0415
            Interpreter,
            load_delegate,
        )

        return Interpreter, load_delegate, "tflite-runtime"
    return Interpreter, load_delegate, "ai-edge-litert"


class TfliteModel(LoadedModel):
    """One interpreter behind a lock; resizes the batch dimension on demand."""

    def __init__(
        self,
        interpreter: Any,
        spec: ModelSpec,
        providers: tuple[str, ...],
        notes: list[str],
        *,
        raw_io: bool = False,
    ) -> None:
        ins = [_io(d) for d in interpreter.get_input_details()]
        outs = [_io(d) for d in interpreter.get_output_details()]
        quantized = any(io.quantized for io in [*ins, *outs])
        self._ins = [_raw(io) for io in ins] if raw_io else ins
        self._outs = [_raw(io) for io in outs] if raw_io else outs
        super().__init__(
            name=spec.name,
            inputs=[io.spec for io in self._ins],
            outputs=[io.spec for io in self._outs],
            backend="tflite",
            providers=providers,
            precision="int8" if quantized else "fp32",
            notes=notes,
        )
        self._interpreter: Any = interpreter
        self._lock = threading.Lock()
        self._shapes = {d["index"]: tuple(d["shape"]) for d in interpreter.get_input_details()}

    def _run(self, inputs: Sequence[Array], deadline: float | None) -> list[Array]:
        # LiteRT cannot stop an invoke(): a run that started finishes, and the caller's
        # admission slot stays taken until it does (its overrun is charged to its tenant).
        with self._lock:
            it = self._interpreter
            if it is None:
                raise BackendError(f"{self.name}: model is closed")
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceeded(f"{self.name}: deadline passed waiting for the model")
            try:
                self._set_inputs(it, inputs)
                it.invoke()
                return [_dequantize(io, it.get_tensor(io.index)) for io in self._outs]
            except (ValueError, RuntimeError) as e:
                raise BackendError(f"{self.name}: inference failed: {e}") from e

    def _set_inputs(self, it: Any, inputs: Sequence[Array]) -> None:
        resized = False
        for io, array in zip(self._ins, inputs, strict=True):
            if self._shapes[io.index] != array.shape:
                it.resize_tensor_input(io.index, list(array.shape), strict=True)
                self._shapes[io.index] = array.shape
                resized = True
        if resized:
            it.allocate_tensors()
        for io, array in zip(self._ins, inputs, strict=True):
            it.set_tensor(io.index, _quantize(io, array))

    def close(self) -> None:
        with self._lock:
            self._interpreter = None


class TfliteBackend(InferenceBackend):
    """Creates LiteRT interpreters from bytes with the profile's delegates."""

    type_key = "tflite"

    def __init__(self) -> None:
        self._interpreter_cls, self._load_delegate, self.package = import_runtime()

    def load(
        self, source: bytes | VerifiedBlob, spec: ModelSpec, options: LoadOptions
    ) -> TfliteModel:
        data, _ = model_bytes(source)  # nothing here is keyed by the digest
        if options.precision == "bf16":
            raise BackendError("TFLite has no bf16 compute mode; use an int8/fp16/fp32 variant")
        settings = options.profile.tflite
        notes: list[str] = []
        interpreter, providers = self._create(data, spec, settings, notes)
        model = TfliteModel(interpreter, spec, providers, notes, raw_io=options.raw_quantized_io)
        if model.precision == "int8" and options.precision != "int8":
            notes.append(f"asked for {options.precision}, but the model has int8 I/O tensors")
        model.precision = options.precision
        check_declared(spec.name, "inputs", spec.inputs, model.inputs)
        check_declared(spec.name, "outputs", spec.outputs, model.outputs)
        for note in notes:
            log.info("model %s: %s", spec.name, note)
        return model

    def _create(
        self, data: bytes, spec: ModelSpec, settings: TfliteSettings, notes: list[str]
    ) -> tuple[Any, tuple[str, ...]]:
        for delegate in settings.delegates:
            loaded = self._delegate(delegate.library, delegate.options, notes)
            if loaded is None:
                continue
            try:
                it = self._interpreter(data, settings, [loaded])
            except (ValueError, RuntimeError) as e:
                notes.append(f"delegate {delegate.name} rejected the model: {e}")
                continue
            return it, (delegate.name,)
        if settings.delegates:
            notes.append(f"no delegate usable; running on the built-in {CPU_PATH} path")
        try:
            return self._interpreter(data, settings, []), (CPU_PATH,)
        except (ValueError, RuntimeError) as e:
            raise BackendError(f"{spec.name}: {self.package} cannot load the model: {e}") from e

    def _interpreter(self, data: bytes, settings: TfliteSettings, delegates: list[Any]) -> Any:
        it = self._interpreter_cls(
            model_content=data,
            experimental_delegates=delegates or None,
            num_threads=settings.threads or None,
        )
        it.allocate_tensors()
        return it

    def _delegate(self, library: str, options: dict[str, str], notes: list[str]) -> Any:
        # Probe with ctypes first: a failed load_delegate leaves a half-built Delegate whose
        # __del__ raises (an "unraisable" exception), which we do not want in the logs.
        try:
            ctypes.CDLL(library)
        except OSError as e:
            notes.append(f"delegate {library} unavailable: {e}")
            return None
        try:
            return self._load_delegate(library, dict(options))
        except (OSError, ValueError, RuntimeError) as e:
            notes.append(f"delegate {library} failed to load: {e}")
            return None


def _io(detail: dict[str, Any]) -> _Io:
    raw = np.dtype(detail["dtype"])
    scale, zero_point = detail.get("quantization", (0.0, 0))
    params = detail.get("quantization_parameters", {})
    if len(params.get("scales", ())) > 1:
        raise BackendError(f"tensor {detail['name']!r}: per-channel quantized I/O not supported")
    signature = detail.get("shape_signature", detail["shape"])
    shape = tuple(int(d) for d in signature)
    quantized = scale != 0.0 and raw.kind in "iu"
    datatype = "FP32" if quantized else datatype_of(raw)
    return _Io(
        index=int(detail["index"]),
        spec=TensorSpec(name=str(detail["name"]), datatype=datatype, shape=shape),
        raw=raw,
        scale=float(scale),
        zero_point=int(zero_point),
    )


def _raw(io: _Io) -> _Io:
    """The tensor as the model stores it: its own dtype, no (de)quantization."""
    spec = TensorSpec(name=io.spec.name, datatype=datatype_of(io.raw), shape=io.spec.shape)
    return _Io(index=io.index, spec=spec, raw=io.raw, scale=0.0, zero_point=0)


def _quantize(io: _Io, array: Array) -> Array:
    if not io.quantized:
        return array
    q = array / np.float32(io.scale)
    np.rint(q, out=q)
    q += np.float32(io.zero_point)
    lo, hi = io.bounds
    np.clip(q, lo, hi, out=q)
    raw: Array = q.astype(io.raw)  # typed: numpy's stubs give Any under mypy's 3.10
    return raw


def _dequantize(io: _Io, array: Array) -> Array:
    if not io.quantized:
        return array
    real: Array = (array.astype(np.float32) - np.float32(io.zero_point)) * np.float32(io.scale)
    return real  # typed: numpy's stubs give Any under mypy's 3.10

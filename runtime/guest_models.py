"""Small ``ModelHandle``s for ``wasmgate run-guest`` (and sandbox tests): ONNX Runtime, LiteRT.

run-guest is a developer tool that runs models given on the command line, so it loads them
directly: ONNX Runtime on CPU only (explicit provider list, from bytes so no external data
is read), LiteRT (``ai-edge-litert``) for TFLite, ``tflite-runtime`` only as a fallback.
The daemon uses ``wasmgate.runtime.backends`` (device profiles, precision, batching) instead;
run-guest is meant to move to those backends once a profile-free CPU entry point exists.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from wasmgate.sandbox.models import ModelHandle, TensorSpec, datatype_of

__all__ = ["LiteRtModel", "OrtModel", "PreloadedModels", "load_model"]

Array = npt.NDArray[Any]
_ORT_TYPES = {
    "tensor(float)": "FP32",
    "tensor(float16)": "FP16",
    "tensor(double)": "FP64",
    "tensor(int8)": "INT8",
    "tensor(uint8)": "UINT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}


def _dim(d: object) -> int:
    return d if isinstance(d, int) and d >= 0 else -1


class OrtModel:
    """An ONNX Runtime session on CPU; ``infer`` is thread-safe (``InferenceSession.run`` is)."""

    def __init__(self, data: bytes, name: str = "model") -> None:
        """Create the session from model bytes (external data is refused from bytes)."""
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        self.name = name
        self.inputs: Sequence[TensorSpec] = [self._spec(i) for i in self.session.get_inputs()]
        self.outputs: Sequence[TensorSpec] = [self._spec(o) for o in self.session.get_outputs()]
        self._in_names = [i.name for i in self.session.get_inputs()]

    @staticmethod
    def _spec(arg: Any) -> TensorSpec:
        return TensorSpec(arg.name, _ORT_TYPES.get(arg.type, arg.type), tuple(map(_dim, arg.shape)))

    def infer(self, inputs: Sequence[Array]) -> list[Array]:
        """Run the session with inputs in ``inputs`` order."""
        feed = dict(zip(self._in_names, inputs, strict=True))
        return [np.asarray(o) for o in self.session.run(None, feed)]


def _tflite_interpreter(data: bytes) -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: PLC0415 - optional, heavy
    except ImportError:  # vendor-pinned stacks may only have tflite-runtime
        from tflite_runtime.interpreter import Interpreter  # noqa: PLC0415
    return Interpreter(model_content=data, num_threads=1)


class LiteRtModel:
    """A LiteRT interpreter; a lock makes ``infer`` thread-safe (interpreters are not)."""

    def __init__(self, data: bytes, name: str = "model") -> None:
        """Build the interpreter from ``.tflite`` bytes and allocate its tensors."""
        self._interp = _tflite_interpreter(data)
        self._interp.allocate_tensors()
        self._lock = threading.Lock()
        self.name = name
        self._in = self._interp.get_input_details()
        self._out = self._interp.get_output_details()
        self.inputs: Sequence[TensorSpec] = [self._spec(d) for d in self._in]
        self.outputs: Sequence[TensorSpec] = [self._spec(d) for d in self._out]

    @staticmethod
    def _spec(detail: Mapping[str, Any]) -> TensorSpec:
        sig = detail.get("shape_signature", detail["shape"])
        return TensorSpec(detail["name"], datatype_of(detail["dtype"]), tuple(int(d) for d in sig))

    def infer(self, inputs: Sequence[Array]) -> list[Array]:
        """Set inputs, invoke, copy outputs (resizing the inputs when their shape changed)."""
        with self._lock:
            for detail, arr in zip(self._in, inputs, strict=True):
                if tuple(detail["shape"]) != arr.shape:
                    self._interp.resize_tensor_input(detail["index"], arr.shape)
                    self._interp.allocate_tensors()
                    self._in = self._interp.get_input_details()
                self._interp.set_tensor(detail["index"], arr)
            self._interp.invoke()
            return [np.array(self._interp.get_tensor(d["index"])) for d in self._out]


def load_model(data: bytes, encoding: str, name: str = "model") -> ModelHandle:
    """Load ``onnx`` or ``tensorflowlite`` model bytes (``ValueError`` for other encodings)."""
    if encoding == "onnx":
        return OrtModel(data, name)
    if encoding == "tensorflowlite":
        return LiteRtModel(data, name)
    raise ValueError(f"encoding {encoding!r} is not supported (onnx, tensorflowlite)")


class PreloadedModels:
    """A ``ModelProvider`` for run-guest: named preloads, and any bytes the guest loads."""

    def __init__(self, named: Mapping[str, ModelHandle] | None = None) -> None:
        """Serve ``named`` to ``load_by_name``."""
        self._named = dict(named or {})

    def by_name(self, name: str) -> ModelHandle | None:
        """The preloaded model ``name``, if any."""
        return self._named.get(name)

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        """Load the bytes (run-guest trusts the developer's own guest); CPU only."""
        del target  # every target runs on CPU here, as WasmEdge's ONNX/TFLite backends do
        return load_model(data, encoding)

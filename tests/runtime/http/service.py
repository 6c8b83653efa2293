"""An in-test `ServiceAPI` backed by real ONNX Runtime sessions: the HTTP bridge is under test.

Models: ``add`` (FP32, two outputs, batched), ``identity`` (every datatype but BF16),
``bf16`` (BF16 through OrtValues). Adapters: ``echo`` (payload back, same content type),
``cloud`` (answers as if from the cloud fallback), ``busy`` (Busy), ``slow`` (sleeps until
its deadline, then DeadlineExceeded), ``fail`` (InferenceFailed), ``crash`` (a bug:
RuntimeError), ``toolarge`` (PayloadTooLarge).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import msgspec
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnx import TensorProto

from tests.runtime.http.models import ELEMENT_TYPES, add_model, bf16_model, identity_model
from wasmgate.runtime import errors
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelAnswer,
    ModelInfo,
    ModelRequest,
    Source,
)
from wasmgate.sandbox.models import InputMismatch, TensorSpec, validate

Array = npt.NDArray[Any]
ADAPTERS = ("echo", "cloud", "busy", "slow", "fail", "crash", "toolarge")
TIMINGS = {"queue": 0.0001, "sandbox": 0.0002, "inference": 0.0003}


def _session(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def _to_ort(array: Array) -> Array:
    # ORT strings are str; latin-1 maps every byte to one code point and back, losslessly.
    if array.dtype == np.object_:
        out: Array = np.vectorize(lambda b: b.decode("latin-1"), otypes=[np.object_])(array)
        return out
    return array


def _from_ort(array: Array) -> Array:
    if array.dtype == np.object_:
        back: Array = np.vectorize(lambda s: s.encode("latin-1"), otypes=[np.object_])(array)
        return back
    return array


def _infos(types: Mapping[str, int]) -> list[ModelInfo]:
    io = {n: (TensorSpec(f"in_{n}", n, (-1, 3)), TensorSpec(f"out_{n}", n, (-1, 3))) for n in types}
    add_in = (TensorSpec("INPUT0", "FP32", (-1, 4)),)
    add_out = (TensorSpec("OUTPUT0", "FP32", (-1, 4)), TensorSpec("OUTPUT1", "FP32", (-1, 4)))
    details = {"provider": "CPUExecutionProvider", "precision": "fp32"}
    payload = (TensorSpec("payload", "BYTES", (-1,)),)
    answer = (TensorSpec("answer", "BYTES", (-1,)),)
    return [
        ModelInfo("add", 3, "onnxruntime_onnx", add_in, add_out, max_batch_size=8,
                  max_queue_delay_us=200, bundle="demo", details=details),
        ModelInfo("identity", 1, "onnxruntime_onnx", tuple(i for i, _ in io.values()),
                  tuple(o for _, o in io.values()), bundle="demo", details=details),
        ModelInfo("bf16", 1, "onnxruntime_onnx", (TensorSpec("in_BF16", "BF16", (-1, 3)),),
                  (TensorSpec("out_BF16", "BF16", (-1, 3)),), bundle="demo",
                  details={"provider": "CPUExecutionProvider", "precision": "bf16"}),
        *(ModelInfo(a, 2, "wasmgate_adapter", payload, answer, kind="adapter", bundle=a)
          for a in ADAPTERS),
    ]  # fmt: skip


class OrtService:
    """Implements `ServiceAPI`; ``ready`` and ``not_ready_models`` are settable by tests."""

    def __init__(self, identity_types: Mapping[str, int] = ELEMENT_TYPES) -> None:
        """``identity_types``: the datatypes model ``identity`` passes through."""
        self.is_ready = True
        self.not_ready_models: set[str] = set()
        self.adapter_requests: list[AdapterRequest] = []
        self._infos = {info.name: info for info in _infos(identity_types)}
        self._sessions = {
            "add": _session(add_model()),
            "identity": _session(identity_model(identity_types)),
            "bf16": _session(bf16_model()),
        }

    @property
    def ready(self) -> bool:
        return self.is_ready

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        info = self._infos.get(name)
        if info is None:
            raise errors.NotFound(errors.unknown_model(name, "is not found", "no such name"))
        if version is not None and version != str(info.version):
            what, detail = f"version {version} is not found", f"serving {info.version}"
            raise errors.NotFound(errors.unknown_model(name, what, detail))
        if name in self.not_ready_models:
            return msgspec.structs.replace(info, ready=False)
        return info

    def list_models(self) -> list[ModelInfo]:
        return [self.model_info(name) for name in self._infos]

    def adapter_names(self) -> list[str]:
        return list(ADAPTERS)

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        info = self.model_info(req.model, req.version)
        if info.kind != "model":
            raise errors.NotFound(f"{req.model!r} is an adapter")
        label = f"model {req.model!r}"
        try:  # a ServiceAPI validates the tensors against the model's contract, once
            validate(info.inputs, req.inputs, label, text=True)
        except InputMismatch as e:
            raise errors.BadRequest(str(e)) from None
        declared = [o.name for o in info.outputs]
        names = list(req.outputs) if req.outputs is not None else declared
        for name in set(names) - set(declared):
            raise errors.BadRequest(f"{label} has no output {name!r}")
        outputs = await asyncio.to_thread(self._run, req.model, dict(req.inputs), names)
        return ModelAnswer(outputs, "local", info.version, dict(TIMINGS))

    def _run(self, model: str, inputs: dict[str, Array], names: list[str]) -> dict[str, Array]:
        session = self._sessions[model]
        if model == "bf16":
            return {names[0]: self._run_bf16(session, inputs["in_BF16"])} if names else {}
        feeds = {name: _to_ort(array) for name, array in inputs.items()}
        results = session.run(names, feeds)
        return {name: _from_ort(np.asarray(r)) for name, r in zip(names, results, strict=True)}

    @staticmethod
    def _run_bf16(session: ort.InferenceSession, x: Array) -> Array:
        out = np.empty(x.shape, dtype=np.uint16)
        binding = session.io_binding()
        bf16 = TensorProto.BFLOAT16
        binding.bind_ortvalue_input(
            "in_BF16",
            ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                np.ascontiguousarray(x).view(np.uint16), bf16
            ),
        )
        binding.bind_ortvalue_output(
            "out_BF16", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, bf16)
        )
        session.run_with_iobinding(binding)
        return out.view(ml_dtypes.bfloat16)

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        info = self.model_info(req.adapter)
        self.adapter_requests.append(req)
        return await self._adapter(req, info.version)

    async def _adapter(self, req: AdapterRequest, version: int) -> AdapterAnswer:
        name = req.adapter
        if name == "busy":
            raise errors.Busy("busy: 4 in flight, queue of 8 full")
        if name == "slow":
            await asyncio.sleep(max(0.0, (req.deadline or time.monotonic()) - time.monotonic()))
            raise errors.DeadlineExceeded("slow: deadline passed after the sandbox started")
        if name == "fail":
            raise errors.InferenceFailed("fail: guest trapped (unreachable)")
        if name == "crash":
            raise RuntimeError("secret internal detail")
        if name == "toolarge":
            raise errors.PayloadTooLarge("toolarge: payload over the manifest's max_input_bytes")
        source: Source = "cloud" if name == "cloud" else "local"
        reason = "low confidence" if name == "cloud" else None
        timings = dict(TIMINGS) | ({"fallback": 0.004} if source == "cloud" else {})
        content_type = req.content_type or "application/octet-stream"
        return AdapterAnswer(
            req.payload, content_type, source, version, timings, fallback_reason=reason
        )

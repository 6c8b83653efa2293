"""A small in-test `ServiceAPI`: the bridge is under test, so the service does real work.

Adapter ``sum`` adds the numbers of a JSON ``{"values": [...]}`` or CSV payload; ``echo``
returns the payload and emits it as an event; ``slow`` sleeps then answers; ``fail`` raises
InferenceFailed. Model ``affine`` is a real ONNX Runtime session computing ``2x + 1``.
Every call is counted per payload, so tests can prove "worked exactly once".
"""

from __future__ import annotations

import asyncio
import collections
import json
import time

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from tests.sandbox.helpers import affine_onnx
from wasmgate.runtime import errors
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelAnswer,
    ModelInfo,
    ModelRequest,
)
from wasmgate.sandbox.models import TensorSpec

ADAPTERS = ("sum", "echo", "slow", "fail")


def _sum(payload: bytes) -> float:
    try:
        if payload.startswith(b"{"):
            values = json.loads(payload)["values"]
        else:
            values = [float(v) for v in payload.decode().split(",")]
        return float(np.sum(np.asarray(values, dtype=np.float64)))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise errors.BadRequest(f"sum: expected JSON {{'values': [...]}} or CSV: {e}") from e


class FakeService:
    """Implements `ServiceAPI` with numpy and one real ONNX Runtime session."""

    def __init__(self, slow_s: float = 0.2) -> None:
        self.calls: collections.Counter[bytes] = collections.Counter()
        self.slow_s = slow_s
        self._session = ort.InferenceSession(affine_onnx(), providers=["CPUExecutionProvider"])

    @property
    def ready(self) -> bool:
        return True

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        if req.adapter not in ADAPTERS:
            raise errors.NotFound(f"no adapter named {req.adapter!r}")
        if req.deadline is not None and req.deadline <= time.monotonic():
            raise errors.DeadlineExceeded("deadline passed")
        self.calls[req.payload] += 1
        if req.adapter == "slow":
            await asyncio.sleep(self.slow_s)
        if req.adapter == "fail":
            raise errors.InferenceFailed("fail: adapter trapped (unreachable)")
        if req.adapter == "echo":
            return AdapterAnswer(
                req.payload,
                req.content_type or "application/octet-stream",
                "local",
                1,
                events=[req.payload],
            )
        body = json.dumps({"sum": _sum(req.payload)}).encode()
        return AdapterAnswer(body, "application/json", "local", 3)

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        if req.model != "affine":
            raise errors.NotFound(f"no model named {req.model!r}")
        x = req.inputs.get("x")
        if x is None or x.dtype != np.float32 or x.ndim != 2 or x.shape[1] != 4:
            raise errors.BadRequest("affine: input 'x' must be FP32 [-1, 4]")
        y: npt.NDArray[np.generic] = (await asyncio.to_thread(self._session.run, None, {"x": x}))[0]
        return ModelAnswer({"y": y}, "local", 2)

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        for info in self.list_models():
            if info.name == name:
                return info
        raise errors.NotFound(name)

    def list_models(self) -> list[ModelInfo]:
        spec = (TensorSpec("x", "FP32", (-1, 4)),)
        out = (TensorSpec("y", "FP32", (-1, 4)),)
        byte = (TensorSpec("payload", "BYTES", (1,)),)
        adapters = [
            ModelInfo(a, 1, "wasmgate-adapter", byte, byte, kind="adapter") for a in ADAPTERS
        ]
        return [ModelInfo("affine", 2, "onnxruntime_onnx", spec, out), *adapters]

    def adapter_names(self) -> list[str]:
        return list(ADAPTERS)

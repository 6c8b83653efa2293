"""The HTTP app for `bench.bench_http`: one ONNX model and an ``echo`` adapter, no sandbox.

``python -m bench.http_server MODEL.onnx PORT`` serves the V2 routes, the raw adapter
endpoint, ``/metrics`` and the status page exactly as the daemon wires them, over a minimal
`ServiceAPI` (the model runs in a worker thread, like the daemon's pool).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from aiohttp import web

from wasmgate.runtime import errors
from wasmgate.runtime.http import errors as http_errors
from wasmgate.runtime.http import metrics as metrics_routes
from wasmgate.runtime.http import status, v2
from wasmgate.runtime.http.keys import METRICS, SERVICE
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelAnswer,
    ModelInfo,
    ModelRequest,
)
from wasmgate.sandbox.models import TensorSpec

V2_TYPES = {"tensor(float)": "FP32", "tensor(int64)": "INT64", "tensor(int8)": "INT8"}


def _meta(arg: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else -1 for d in arg.shape)
    return TensorSpec(arg.name, V2_TYPES[arg.type], shape)


class BenchService:
    """`ServiceAPI` over one ORT session named ``model.stem`` and an ``echo`` adapter."""

    def __init__(self, model: Path) -> None:
        self.session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        self.name = model.stem.split("-")[0]
        payload = (TensorSpec("payload", "BYTES", (-1,)),)
        self.infos = {
            self.name: ModelInfo(
                self.name,
                1,
                "onnxruntime_onnx",
                tuple(_meta(i) for i in self.session.get_inputs()),
                tuple(_meta(o) for o in self.session.get_outputs()),
                max_batch_size=32,
                details={"provider": "CPUExecutionProvider", "precision": "fp32"},
            ),
            "echo": ModelInfo("echo", 1, "wasmgate_adapter", payload, payload, kind="adapter"),
        }

    @property
    def ready(self) -> bool:
        return True

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        if name not in self.infos or version not in (None, "1"):
            raise errors.NotFound(errors.unknown_model(name, "is not found", "no such name"))
        return self.infos[name]

    def list_models(self) -> list[ModelInfo]:
        return list(self.infos.values())

    def adapter_names(self) -> list[str]:
        return ["echo"]

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        info = self.model_info(req.model)
        names = list(req.outputs or [o.name for o in info.outputs])
        results = await asyncio.to_thread(self.session.run, names, dict(req.inputs))
        return ModelAnswer(
            {n: np.asarray(r) for n, r in zip(names, results, strict=True)}, "local", 1
        )

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        self.model_info(req.adapter)
        return AdapterAnswer(req.payload, "application/octet-stream", "local", 1)


def build(model: Path) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[SERVICE] = BenchService(model)
    app[METRICS] = Metrics()
    http_errors.setup(app)
    v2.setup(app)
    metrics_routes.setup(app)
    status.setup(app)
    return app


def main() -> None:
    model, port = Path(sys.argv[1]), int(sys.argv[2])
    web.run_app(build(model), host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()

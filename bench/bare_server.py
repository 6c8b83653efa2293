"""The ceiling for the HTTP figures: a bare aiohttp + ONNX Runtime V2 JSON handler.

``python -m bench.bare_server PORT NAME=MODEL.onnx [NAME=MODEL.onnx ...]``

What a minimal hand-written server does for ``POST /v2/models/{name}/infer`` with a KServe
V2 JSON body: stdlib ``json``, one ``numpy`` array per input, ``session.run`` inline on the
event loop (no thread hop, no validation, no metrics, no sandbox), a V2 JSON answer. Nothing
a served product needs is here, which is why it is the ceiling wasmgate's V2 path is
compared with (same client, same machine, same run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from aiohttp import web

SESSIONS = web.AppKey("sessions", dict)


async def infer(request: web.Request) -> web.Response:
    session: ort.InferenceSession = request.app[SESSIONS][request.match_info["model"]]
    body = json.loads(await request.read())
    feeds = {
        i["name"]: np.asarray(i["data"], dtype=np.float32).reshape(i["shape"])
        for i in body["inputs"]
    }
    names = [o.name for o in session.get_outputs()]
    outputs = session.run(names, feeds)
    answer = {
        "model_name": request.match_info["model"],
        "outputs": [
            {"name": n, "datatype": "FP32", "shape": list(r.shape), "data": r.ravel().tolist()}
            for n, r in zip(names, outputs, strict=True)
        ],
    }
    return web.Response(body=json.dumps(answer), content_type="application/json")


def build(models: dict[str, Path]) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    options = ort.SessionOptions()
    # The daemon's generic-x86_64 profile: all cores, no spinning. Same sessions on both
    # sides, so the figures differ by the serving stack alone.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    app[SESSIONS] = {
        name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for name, path in models.items()
    }
    app.router.add_post("/v2/models/{model}/infer", infer)
    return app


def main() -> None:
    port = int(sys.argv[1])
    models = {a.split("=", 1)[0]: Path(a.split("=", 1)[1]) for a in sys.argv[2:]}
    web.run_app(build(models), host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()

"""The kserve SDK's REST client (V2) against a running wasmgate HTTP server.

The kserve package cannot share the project's environment (it pins other versions of
pydantic, protobuf, psutil, cryptography and brings kubernetes, grpcio, pandas, fastapi), so
it runs from its own virtualenv; `test_kserve.py` starts a server and runs this file with
that interpreter:

    $WASMGATE_KSERVE_PYTHON kserve_check.py http://127.0.0.1:PORT MODEL INPUT ROWS COLS

It checks health, model readiness and a 404, sends ``arange(ROWS*COLS) / 4`` as FP32 to
MODEL's INPUT once as JSON and once binary, and prints the outputs of both as one JSON line
for the test to verify. Exit status 0 = the protocol checks passed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable
from typing import Any

import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig


def request(model: str, name: str, x: np.ndarray[Any, Any], binary: bool) -> InferRequest:
    tensor = InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    return InferRequest(model, [tensor], request_id=f"kserve-{binary}")


async def failure(call: Awaitable[object]) -> Exception:
    try:
        await call
    except Exception as err:
        return err
    raise AssertionError("the call did not fail")


async def check(base: str, model: str, name: str, rows: int, cols: int) -> dict[str, Any]:
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=1, timeout=30))
    x = (np.arange(rows * cols, dtype=np.float32) / 4).reshape(rows, cols)
    results: dict[str, Any] = {}
    try:
        assert await client.is_server_live(base) is True
        assert await client.is_server_ready(base) is True
        assert await client.is_model_ready(base, model) is True
        for binary in (False, True):
            response = await client.infer(base, request(model, name, x, binary), model_name=model)
            assert response.id == f"kserve-{binary}", response.id
            outputs = {o.name: o.as_numpy().tolist() for o in response.outputs}
            results["binary" if binary else "json"] = outputs
        err = await failure(client.infer(base, request("nope", name, x, False), model_name="nope"))
        assert getattr(err, "response").status_code == 404  # noqa: B009 - httpx.HTTPStatusError
        assert "nope" in str(err).split("'404 Not Found'")[0], str(err)  # the V2 error message
    finally:
        await client.close()
    return results


if __name__ == "__main__":
    url, model, name, rows, cols = sys.argv[1:6]
    print(json.dumps(asyncio.run(check(url, model, name, int(rows), int(cols)))))

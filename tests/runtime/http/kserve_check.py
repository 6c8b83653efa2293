"""The kserve SDK's REST client (V2) against a running wasmgate HTTP server.

The kserve package cannot share the project's environment (it pins other versions of
pydantic, protobuf, psutil, cryptography and brings kubernetes, grpcio, pandas, fastapi), so
it runs from its own virtualenv; `test_kserve.py` starts the server and runs this file with
that interpreter: ``$WASMGATE_KSERVE_PYTHON kserve_check.py http://127.0.0.1:PORT``.
Exit status 0 = every check passed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable

import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig


def add_request(binary: bool) -> InferRequest:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    tensor = InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    return InferRequest("add", [tensor], request_id=f"kserve-{binary}")


async def failure(call: Awaitable[object]) -> Exception:
    try:
        await call
    except Exception as err:
        return err
    raise AssertionError("the call did not fail")


async def check(base: str) -> None:
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=1, timeout=30))
    try:
        assert await client.is_server_live(base) is True
        assert await client.is_server_ready(base) is True
        assert await client.is_model_ready(base, "add") is True
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        for binary in (False, True):
            response = await client.infer(base, add_request(binary), model_name="add")
            assert response.id == f"kserve-{binary}", response.id
            out = {o.name: o.as_numpy() for o in response.outputs}
            np.testing.assert_array_equal(out["OUTPUT0"], x + 1)
            np.testing.assert_array_equal(out["OUTPUT1"], x * 2)
        err = await failure(client.infer(base, add_request(False), model_name="nope"))
        assert getattr(err, "response").status_code == 404  # noqa: B009 - httpx.HTTPStatusError
        assert "no model or adapter named 'nope'" in str(err), str(err)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(check(sys.argv[1]))
    print("kserve SDK: all checks passed")

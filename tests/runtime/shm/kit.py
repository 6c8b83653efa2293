"""Helpers of the shared-memory tests against a real daemon (`conftest` has the fixtures).

One daemon per test module (shared memory on, small caps, HTTP and gRPC) serves ``double``
(y = 2x, input ``x`` FP32 [-1, 4]). Regions are made by ``tritonclient.utils.shared_memory``,
as a Triton client would.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name

Client = Any  # tritonclient.http or tritonclient.grpc InferenceServerClient: the same calls
X = np.array([[1.0, -2.5, np.nan, np.inf], [0.0, -0.0, 1e38, -np.inf]], dtype=np.float32)
CAPS: Mapping[str, object] = {
    "enabled": True, "max_regions": 4, "max_region_bytes": 1 << 20, "max_total_bytes": 2 << 20,
}  # fmt: skip


def start_daemon(
    root: Path, shared_memory: Mapping[str, object] | None, env: Mapping[str, str] | None = None
) -> Daemon:
    kit = BundleKit(root / "kit")
    bundles = root / "d" / "data" / "bundles"
    bundles.mkdir(parents=True, exist_ok=True)
    kit.build("quiet", 1, adapter=False, model_name="double", out_dir=bundles)
    config: dict[str, object] = {
        "paths": {"trust_file": kit.save_trust(root / "trust.json")},
        "profile": host_profile_name(),
        "grpc": {"port": free_port()},
    }
    if shared_memory is not None:
        config["shared_memory"] = dict(shared_memory)
    daemon = Daemon(root / "d", config, env=env)
    daemon.start()
    return daemon


def grpc_url(daemon: Daemon) -> str:
    return f"127.0.0.1:{daemon.get_json('/v1/status')['components']['grpc']['port']}"


def connect(daemon: Daemon, kind: str) -> Client:
    if kind == "http":
        return thttp.InferenceServerClient(daemon.url.removeprefix("http://"))
    return tgrpc.InferenceServerClient(grpc_url(daemon))


def key(name: str) -> str:
    return f"/wg_test-{os.getpid()}-{name}"


def module(kind: str) -> Any:
    return thttp if kind == "http" else tgrpc


def shm_input(kind: str, region: str, size: int, offset: int = 0) -> Any:
    tensor = module(kind).InferInput("x", list(X.shape), "FP32")
    tensor.set_shared_memory(region, size, offset)
    return tensor


def failure(call: Callable[[], object]) -> str:
    with pytest.raises(InferenceServerException) as err:
        call()
    return str(err.value.message())


def still_serving(client: Client, kind: str) -> None:
    """A plain request is answered as before (nothing else changed)."""
    tensor = module(kind).InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    result = client.infer("double", [tensor])
    np.testing.assert_array_equal(result.as_numpy("y"), np.full((1, 4), 2, dtype=np.float32))

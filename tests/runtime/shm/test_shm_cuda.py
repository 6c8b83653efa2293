"""The CUDA shared-memory endpoints answer as a CPU-only Triton does (issue 50 item 8).

Triton's own system shared-memory example clients (simple_http_shm_client.py,
simple_grpc_shm_client.py) clear CUDA regions before anything else; wasmgate answered them
404 / UNIMPLEMENTED, so they stopped at their first call. Driven here by unmodified
tritonclient over both transports, with the example's own sequence of calls.
"""

from __future__ import annotations

import base64
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.runtime.shm.kit import CAPS, Client, X, connect, failure, key, shm_input, start_daemon

HANDLE = base64.b64encode(bytes(64))
"""A raw CUDA IPC handle as tritonclient takes it (base64, as cudashm.get_raw_handle gives)."""
GPUS = "failed to register CUDA shared memory region: 'gpu0', GPUs not supported"


def no_cuda_regions(client: Client, kind: str) -> None:
    found = client.get_cuda_shared_memory_status()
    assert (found == []) if kind == "http" else (len(found.regions) == 0)


def test_tritons_example_sequence_runs_unmodified(client: Client, kind: str, regions: Any) -> None:
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()  # where the example client stopped
    client.unregister_cuda_shared_memory("gpu0")  # by name: nothing to remove is success
    no_cuda_regions(client, kind)
    handle = regions("in", X.nbytes)
    shm.set_shared_memory_region(handle, [X])
    client.register_system_shared_memory("in", key("in"), X.nbytes)
    result = client.infer("double", [shm_input(kind, "in", X.nbytes)])
    np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
    no_cuda_regions(client, kind)  # a system region is not a CUDA one


def test_a_cuda_register_is_refused_as_triton_refuses_it(client: Client, kind: str) -> None:
    with pytest.raises(InferenceServerException) as err:
        client.register_cuda_shared_memory("gpu0", HANDLE, 0, 4096)
    assert err.value.message() == GPUS
    assert str(err.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT")
    no_cuda_regions(client, kind)
    assert client.is_server_live()  # and the daemon keeps serving


def test_same_rules_as_the_system_endpoints(tmp_path: Path) -> None:
    """Off by default and token-guarded, like the system endpoints: a CUDA call never
    answers a caller the system endpoints would refuse."""
    off = start_daemon(tmp_path / "off", None)
    try:
        for kind in ("http", "grpc"):
            client = connect(off, kind)
            want = "system shared memory is off: set shared_memory.enabled = true"
            assert failure(client.unregister_cuda_shared_memory) == want
            assert failure(client.get_cuda_shared_memory_status) == want
            client.close()
    finally:
        off.stop()
    guarded = start_daemon(tmp_path / "token", {**CAPS, "token": "s3cret"})
    try:
        token_rules(guarded)
    finally:
        guarded.stop()


def token_rules(daemon: Daemon) -> None:
    want = "shared memory: missing or wrong bearer token"
    auth = {"authorization": "Bearer s3cret"}
    for kind in ("http", "grpc"):
        client = connect(daemon, kind)
        register = partial(client.register_cuda_shared_memory, "gpu0", HANDLE, 0, 8)
        assert failure(client.unregister_cuda_shared_memory) == want
        assert failure(register) == want
        client.unregister_cuda_shared_memory(headers=auth)
        assert failure(partial(register, headers=auth)) == GPUS
        client.close()

"""Shared-memory regions with ``[workers] count = 2``: a region registered through one
connection works on any worker, and an unregister reaches every worker (the supervisor
applies the call, then sends it to each worker: `wasmgate.runtime.http.forward.FAN_OUT`).
Each request below opens a client of its own, so the requests spread over both workers."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.runtime.shm.kit import CAPS, X, key, shm_input, start_daemon

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = start_daemon(
        tmp_path_factory.mktemp("shm-workers"), CAPS, env={"WASMGATE_WORKERS__COUNT": "2"}
    )
    try:
        workers = daemon.get_json("/v1/status")["components"]["workers"]["workers"]
        assert len(workers) == 2
        yield daemon
    finally:
        daemon.stop()


def fresh(daemon: Daemon) -> thttp.InferenceServerClient:
    return thttp.InferenceServerClient(daemon.url.removeprefix("http://"))


def test_a_region_registered_once_serves_on_every_worker(gateway: Daemon, regions: Any) -> None:
    source = regions("wk-in", X.nbytes)
    shm.set_shared_memory_region(source, [X])
    first = fresh(gateway)
    first.register_system_shared_memory("wk-in", key("wk-in"), X.nbytes)
    try:
        for _ in range(24):
            client = fresh(gateway)
            result = client.infer("double", [shm_input("http", "wk-in", X.nbytes)])
            np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
            client.close()
    finally:
        first.unregister_system_shared_memory("wk-in")
        first.close()
    refused = 0
    for _ in range(24):
        client = fresh(gateway)
        with pytest.raises(InferenceServerException, match="wk-in"):
            client.infer("double", [shm_input("http", "wk-in", X.nbytes)])
        refused += 1
        client.close()
    assert refused == 24  # no worker still holds the unregistered region


def test_a_remote_address_cannot_ride_on_the_workers_header(gateway: Daemon) -> None:
    """The client's own X-Wasmgate-Peer is dropped: the worker writes the socket's peer (a
    loopback client claiming a remote address is still loopback; trusted, the header would
    have made it remote and refused, as it would let a remote client claim loopback)."""
    req = urllib.request.Request(
        f"{gateway.url}/v2/systemsharedmemory/status",
        headers={"X-Wasmgate-Peer": "203.0.113.9"},
    )
    with urllib.request.urlopen(req, timeout=10) as answer:
        assert answer.status == 200  # loopback, as the socket says

"""System shared memory against a real ``wasmgate serve``, with unmodified tritonclient:
the flows a Triton client uses, restart and shutdown, the switch and the token."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm

from tests.fixtures.daemon import Daemon
from tests.runtime.shm.kit import (
    CAPS,
    Client,
    X,
    connect,
    failure,
    key,
    module,
    shm_input,
    start_daemon,
    still_serving,
)  # fmt: skip


def test_inputs_and_outputs_through_regions(
    daemon: Daemon, client: Client, kind: str, regions: Any
) -> None:
    """Triton's example flow: register, write input, infer into an output region, read."""
    source, sink = regions("in", X.nbytes), regions("out", X.nbytes + 64)
    shm.set_shared_memory_region(source, [X])
    client.register_system_shared_memory("in", key("in"), X.nbytes)
    client.register_system_shared_memory("out", key("out"), X.nbytes + 64)
    summary = daemon.get_json("/v1/status")["components"]["shared_memory"]
    assert summary == {"regions": 2, "max_regions": 4, "bytes": 2 * X.nbytes + 64,
                       "max_total_bytes": 2 << 20}  # fmt: skip
    status = client.get_system_shared_memory_status()
    listed = status if kind == "http" else [
        {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
        for r in status.regions.values()
    ]  # fmt: skip
    assert sorted(listed, key=lambda r: str(r["name"])) == [
        {"name": "in", "key": key("in"), "offset": 0, "byte_size": X.nbytes},
        {"name": "out", "key": key("out"), "offset": 0, "byte_size": X.nbytes + 64},
    ]
    output = module(kind).InferRequestedOutput("y")
    output.set_shared_memory("out", X.nbytes + 64, offset=0)
    result = client.infer("double", [shm_input(kind, "in", X.nbytes)], outputs=[output])
    meta = result.get_output("y")
    shape = list(meta["shape"] if kind == "http" else meta.shape)
    assert shape == [2, 4]
    got = shm.get_contents_as_numpy(sink, np.float32, shape)
    np.testing.assert_array_equal(got, X * 2)  # nan, inf and -0.0 are just data
    # The region's new bytes are the next request's input: mapped once, read each time.
    shm.set_shared_memory_region(source, [X + 1])
    result = client.infer("double", [shm_input(kind, "in", X.nbytes)])
    np.testing.assert_array_equal(result.as_numpy("y"), (X + 1) * 2)


def test_a_region_at_an_offset(client: Client, kind: str, regions: Any) -> None:
    handle = regions("big", 8192)
    shm.set_shared_memory_region(handle, [X], offset=4096 + 16)
    client.register_system_shared_memory("part", key("big"), 4096, offset=4096)
    result = client.infer("double", [shm_input(kind, "part", X.nbytes, offset=16)])
    np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
    message = failure(lambda: client.infer("double", [shm_input(kind, "part", X.nbytes, 4090)]))
    assert "is outside the region of 4096 bytes" in message


def test_regions_are_the_daemons_not_the_connections(
    daemon: Daemon, client: Client, kind: str, regions: Any
) -> None:
    """Registered over one transport and connection, used over the other (as Triton)."""
    source = regions("shared", X.nbytes)
    shm.set_shared_memory_region(source, [X])
    client.register_system_shared_memory("shared", key("shared"), X.nbytes)
    other_kind = "grpc" if kind == "http" else "http"
    other = connect(daemon, other_kind)
    try:
        result = other.infer("double", [shm_input(other_kind, "shared", X.nbytes)])
        np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
        other.unregister_system_shared_memory("shared")
    finally:
        other.close()
    message = failure(lambda: client.infer("double", [shm_input(kind, "shared", X.nbytes)]))
    assert "no shared memory region named 'shared' is registered" in message


def test_regions_are_forgotten_at_restart_and_unregistered_on_sigterm(
    tmp_path: Path, regions: Any
) -> None:
    daemon = start_daemon(tmp_path, CAPS)
    try:
        regions("keep", 4096)
        client = thttp.InferenceServerClient(daemon.url.removeprefix("http://"))
        client.register_system_shared_memory("keep", key("keep"), 4096)
        assert daemon.stop() == 0
        assert "shared memory regions unregistered at shutdown" in daemon.log()
        daemon.start()
        assert client.get_system_shared_memory_status() == []
        client.close()
    finally:
        daemon.stop()


def refused_without_the_token(client: Client, kind: str) -> None:
    want = "shared memory: missing or wrong bearer token"
    assert failure(lambda: client.register_system_shared_memory("t", key("t"), 4096)) == want
    auth = {"authorization": "Bearer s3cret"}
    client.register_system_shared_memory("t", key("t"), 4096, headers=auth)
    assert failure(lambda: client.infer("double", [shm_input(kind, "t", X.nbytes)])) == want
    result = client.infer("double", [shm_input(kind, "t", X.nbytes)], headers=auth)
    assert result.as_numpy("y").shape == (2, 4)
    still_serving(client, kind)  # plain requests need no token
    client.unregister_system_shared_memory(headers=auth)


def test_off_by_default_and_the_token_when_set(tmp_path: Path, regions: Any) -> None:
    regions("t", 4096)
    off = start_daemon(tmp_path / "off", None)
    try:
        for kind in ("http", "grpc"):
            client = connect(off, kind)
            message = failure(partial(client.register_system_shared_memory, "t", key("t"), 64))
            assert message == "system shared memory is off: set shared_memory.enabled = true"
            client.close()
    finally:
        off.stop()
    guarded = start_daemon(tmp_path / "token", {**CAPS, "token": "s3cret"})
    try:
        for kind in ("http", "grpc"):
            client = connect(guarded, kind)
            refused_without_the_token(client, kind)
            client.close()
    finally:
        guarded.stop()

"""Attacks on system shared memory, against a real daemon with unmodified tritonclient: keys
outside the namespace, paths and links, sizes past the object, an owner shrinking or
removing its object, the caps, misused parameters. Each is refused with a one-line error
and the daemon answers a plain request as before."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm

from tests.fixtures.daemon import Daemon
from tests.runtime.shm.kit import (
    CAPS,
    Client,
    X,
    connect,
    failure,
    grpc_url,
    key,
    module,
    shm_input,
    start_daemon,
    still_serving,
)  # fmt: skip


@pytest.mark.parametrize(
    ("bad_key", "expected"),
    [
        ("/etc/passwd", "is not a POSIX shared memory name"),
        ("/../../etc/passwd", "is not a POSIX shared memory name"),
        ("..", "is not a POSIX shared memory name"),
        ("/a/b", "is not a POSIX shared memory name"),
        ("", "is not a POSIX shared memory name"),
        ("/" + "a" * 300, "is not a POSIX shared memory name"),
        ("/wg-test-no-such-object", "no such shared memory object"),
    ],
)
def test_keys_outside_the_namespace_are_refused(
    client: Client, kind: str, bad_key: str, expected: str
) -> None:
    message = failure(lambda: client.register_system_shared_memory("r", bad_key, 64))
    assert expected in message
    assert "\n" not in message
    still_serving(client, kind)


def test_a_symbolic_link_in_dev_shm_is_refused(client: Client, kind: str) -> None:
    link = Path("/dev/shm") / f"wg_test-{os.getpid()}-link"
    link.symlink_to("/etc/hostname")
    try:
        message = failure(lambda: client.register_system_shared_memory("r", f"/{link.name}", 4))
    finally:
        link.unlink()
    assert "symbolic link" in message
    still_serving(client, kind)


@pytest.mark.parametrize(("offset", "size"), [(0, 4097), (4096, 1), (4000, 200), (0, 0)])
def test_offset_and_size_past_the_object(
    client: Client, kind: str, regions: Any, offset: int, size: int
) -> None:
    regions("small", 4096)
    message = failure(
        lambda: client.register_system_shared_memory("r", key("small"), size, offset=offset)
    )
    assert f"is outside the object {key('small')!r} of 4096 bytes" in message
    still_serving(client, kind)


def test_a_region_shrunk_by_its_owner_is_refused_not_a_crash(
    client: Client, kind: str, regions: Any
) -> None:
    """SIGBUS is what touching a mapped page past a shrunk object's end gives: checked first."""
    handle = regions("shrink", 65536)
    shm.set_shared_memory_region(handle, [X], offset=32768)
    client.register_system_shared_memory("shrink", key("shrink"), 65536)
    output = module(kind).InferRequestedOutput("y")
    output.set_shared_memory("shrink", 4096, offset=61440)
    os.truncate(f"/dev/shm/{key('shrink')[1:]}", 16)  # pages past the first are gone
    for outputs in (None, [output]):
        tensor = shm_input(kind, "shrink", X.nbytes, offset=32768)
        message = failure(lambda t=tensor, o=outputs: client.infer("double", [t], outputs=o))  # type: ignore[misc]
        assert re.search(r"shrank to 16 bytes under the registered 65536; unregister", message)
    still_serving(client, kind)


def test_a_region_unlinked_by_its_owner_is_refused(client: Client, kind: str, regions: Any) -> None:
    handle = regions("gone", X.nbytes)
    shm.set_shared_memory_region(handle, [X])
    client.register_system_shared_memory("gone", key("gone"), X.nbytes)
    Path(f"/dev/shm/{key('gone')[1:]}").unlink()
    message = failure(lambda: client.infer("double", [shm_input(kind, "gone", X.nbytes)]))
    assert "was removed by its owner; unregister the region" in message
    client.unregister_system_shared_memory("gone")
    still_serving(client, kind)


def test_caps_on_regions_and_bytes(client: Client, kind: str, regions: Any) -> None:
    for i in range(4):
        regions(f"cap{i}", 4096)
        client.register_system_shared_memory(f"cap{i}", key(f"cap{i}"), 4096)
    regions("cap4", 4096)
    message = failure(lambda: client.register_system_shared_memory("cap4", key("cap4"), 4096))
    assert "4 regions registered, the cap (shared_memory.max_regions)" in message
    client.unregister_system_shared_memory()
    regions("huge", (1 << 20) + 1)
    message = failure(
        lambda: client.register_system_shared_memory("huge", key("huge"), (1 << 20) + 1)
    )
    assert "over the cap of 1048576 (shared_memory.max_region_bytes)" in message
    for i in range(2):
        regions(f"mb{i}", 1 << 20)
        client.register_system_shared_memory(f"mb{i}", key(f"mb{i}"), 1 << 20)
    message = failure(lambda: client.register_system_shared_memory("cap0", key("cap0"), 4096))
    assert "over the cap of 2097152 (shared_memory.max_total_bytes)" in message
    still_serving(client, kind)


def test_misused_parameters_are_one_line_errors(client: Client, kind: str, regions: Any) -> None:
    handle = regions("p", X.nbytes)
    shm.set_shared_memory_region(handle, [X])
    client.register_system_shared_memory("p", key("p"), X.nbytes)
    message = failure(lambda: client.register_system_shared_memory("p", key("p"), X.nbytes))
    assert "shared memory region 'p' is already registered" in message
    # a crashed run's regions stay: the message says how to clear them, and that works
    assert "unregister it first, e.g. unregister_system_shared_memory('p')" in message
    client.unregister_system_shared_memory("p")
    client.register_system_shared_memory("p", key("p"), X.nbytes)
    message = failure(lambda: client.infer("double", [shm_input(kind, "nope", X.nbytes)]))
    assert "no shared memory region named 'nope' is registered" in message
    message = failure(lambda: client.infer("double", [shm_input(kind, "p", X.nbytes - 4)]))
    assert "needs 32 bytes, got 28" in message
    small = module(kind).InferRequestedOutput("y")
    small.set_shared_memory("p", 16)
    message = failure(
        lambda: client.infer("double", [shm_input(kind, "p", X.nbytes)], outputs=[small])
    )
    assert "output 'y' needs 32 bytes, its shared memory byte_size is 16" in message
    message = failure(lambda: client.get_system_shared_memory_status("nope"))
    assert "no shared memory region named 'nope'" in message
    still_serving(client, kind)


REGION_16 = {"shared_memory_region": "r", "shared_memory_byte_size": 16}


def infer_body(params: Mapping[str, object], data: list[int] | None = None) -> bytes:
    tensor: dict[str, object] = {"name": "x", "datatype": "FP32", "shape": [1, 4],
                                 "parameters": dict(params)}  # fmt: skip
    if data is not None:
        tensor["data"] = data
    return json.dumps({"inputs": [tensor]}).encode()


def _post(daemon: Daemon, path: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(f"{daemon.url}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/v2/systemsharedmemory/region/r/register", b"{nope", "register body is not valid JSON"),
        ("/v2/systemsharedmemory/region/r/register", b"[]", "must be a JSON object"),
        ("/v2/systemsharedmemory/region/r/register", b"{}", "'key' must be a string"),
        ("/v2/systemsharedmemory/region/r/register", b" " * 5000, "at most 4096 bytes"),
        ("/v2/systemsharedmemory/region/r/register",
         b'{"key": "/x", "byte_size": 1e3}', "'byte_size' must be a non-negative integer"),
        ("/v2/systemsharedmemory/region/a%2Fb/register",
         b'{"key": "/x", "byte_size": 8}', "shared memory region name"),
        ("/v2/models/double/infer", infer_body(REGION_16, data=[1, 2, 3, 4]),
         "'data' and shared_memory_region both given"),
        ("/v2/models/double/infer", infer_body({"shared_memory_byte_size": 16}),
         "shared_memory_region and shared_memory_byte_size go together"),
        ("/v2/models/double/infer", infer_body({**REGION_16, "shared_memory_offset": -1}),
         "shared_memory_offset must be a non-negative integer, got -1"),
    ],
)  # fmt: skip
def test_bad_bodies_get_one_line_errors(daemon: Daemon, path: str, body: bytes, expected: str
                                        ) -> None:  # fmt: skip
    status, message = _post(daemon, path, body)
    assert status == 400
    assert expected in message
    assert "\n" not in message
    assert daemon.get_json("/v2/systemsharedmemory/status") == []


def own_address() -> str | None:
    """This machine's address on its default route, when it has one besides loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent for a UDP connect
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_a_remote_peer_is_refused_even_on_an_exposed_listener(tmp_path: Path, regions: Any) -> None:
    """``http.host = 0.0.0.0``: the network reaches the API, never the shared memory."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback to call from")
    exposed = start_daemon(tmp_path, CAPS, env={"WASMGATE_HTTP__HOST": "0.0.0.0"})
    try:
        handle = regions("net", X.nbytes)
        shm.set_shared_memory_region(handle, [X])
        grpc_port = grpc_url(exposed).rsplit(":", 1)[1]
        urls = {"http": f"{address}:{exposed.port}", "grpc": f"{address}:{grpc_port}"}
        local = connect(exposed, "http")
        local.register_system_shared_memory("net", key("net"), X.nbytes)
        for kind, url in urls.items():
            client = (thttp if kind == "http" else tgrpc).InferenceServerClient(url)
            want = f"system shared memory is for local clients only; {address} is not a loop"
            for call in (
                partial(client.register_system_shared_memory, "r", key("net"), 16),
                partial(client.get_system_shared_memory_status),
                partial(client.unregister_system_shared_memory),
                partial(client.infer, "double", [shm_input(kind, "net", X.nbytes)]),
            ):
                assert failure(call).startswith(want)
            still_serving(client, kind)  # the network is served as before
            client.close()
        assert [r["name"] for r in local.get_system_shared_memory_status()] == ["net"]
        local.close()
    finally:
        exposed.stop()

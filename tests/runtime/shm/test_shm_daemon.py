"""System shared memory against a real ``wasmgate serve``, with unmodified tritonclient.

One daemon (shared memory on, small caps, HTTP and gRPC) serves ``double`` (y = 2x, input
``x`` FP32 [-1, 4]). Regions are made by ``tritonclient.utils.shared_memory``, as a Triton
client would; the attacks are an owner (or anyone) misusing the extension, and after each
one the daemon must answer a plain request as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
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


def start_daemon(root: Path, shared_memory: Mapping[str, object] | None) -> Daemon:
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
    daemon = Daemon(root / "d", config)
    daemon.start()
    return daemon


def grpc_url(daemon: Daemon) -> str:
    return f"127.0.0.1:{daemon.get_json('/v1/status')['components']['grpc']['port']}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    started = start_daemon(tmp_path_factory.mktemp("shm"), CAPS)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(params=["http", "grpc"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def connect(daemon: Daemon, kind: str) -> Client:
    if kind == "http":
        return thttp.InferenceServerClient(daemon.url.removeprefix("http://"))
    return tgrpc.InferenceServerClient(grpc_url(daemon))


@pytest.fixture
def client(daemon: Daemon, kind: str) -> Iterator[Client]:
    client = connect(daemon, kind)
    try:
        yield client
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.fixture
def regions() -> Iterator[Callable[[str, int], Any]]:
    """Make regions (``make(name, size)``, key ``/wg-test-<pid>-<name>``); all destroyed after."""
    made: list[Any] = []

    def make(name: str, size: int) -> Any:
        handle = shm.create_shared_memory_region(name, key(name), size)
        made.append(handle)
        return handle

    try:
        yield make
    finally:
        for handle in made:
            with contextlib.suppress(Exception):  # the test may have unlinked it itself
                shm.destroy_shared_memory_region(handle)


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


def test_inputs_and_outputs_through_regions(client: Client, kind: str, regions: Any) -> None:
    """Triton's example flow: register, write input, infer into an output region, read."""
    source, sink = regions("in", X.nbytes), regions("out", X.nbytes + 64)
    shm.set_shared_memory_region(source, [X])
    client.register_system_shared_memory("in", key("in"), X.nbytes)
    client.register_system_shared_memory("out", key("out"), X.nbytes + 64)
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

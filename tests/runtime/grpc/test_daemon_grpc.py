"""KServe V2 over gRPC against a real ``wasmgate serve``: tritonclient.grpc, real bundles.

One daemon serves ``double`` (y = 2x) and ``slow`` (seconds per run, one in flight, no
queue) over HTTP and gRPC. Misbehaving gRPC clients must not disturb HTTP, deadlines must
stop the work (not merely answer), and a daemon without ``grpc.port`` never imports grpc.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.fixtures.waits import until
from tests.runtime.bundlekit import BundleKit, slow_model
from tests.runtime.stack import host_profile_name

MAX_MESSAGE = 256 * 1024


def _start(
    root: Path,
    grpc: dict[str, int] | None,
    slow_runs: int = 1_000_000,
    drain_s: float = 5,
    slow_deadline_ms: int = 1000,
) -> Daemon:
    """``slow_runs``: MatMuls per run of model ``slow`` (the default takes an hour)."""
    kit = BundleKit(root / "kit")
    bundles = root / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    kit.build("quiet", 1, adapter=False, model_name="double", out_dir=bundles)
    slow = kit.root / "slow.onnx"
    slow.write_bytes(slow_model(slow_runs))
    kit.build("abuser", 1, adapter=False, model_name="slow", model_file=slow, out_dir=bundles,
              batching={"max_batch_size": 1, "max_queue_delay_us": 0},
              sections={"limits": {"max_in_flight": 1, "queue_size": 0,
                                   "deadline_ms": slow_deadline_ms}})  # fmt: skip
    config: dict[str, object] = {
        "paths": {"trust_file": kit.save_trust(root / "trust.json")},
        "profile": host_profile_name(),
        "drain_s": drain_s,
    }
    if grpc is not None:
        config["grpc"] = grpc
    daemon = Daemon(root / "d", config)
    daemon.start()
    return daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    grpc = {"port": free_port(), "max_message_bytes": MAX_MESSAGE}
    started = _start(tmp_path_factory.mktemp("grpc"), grpc)
    try:
        yield started
    finally:
        started.stop()


def _grpc_url(daemon: Daemon) -> str:
    return f"127.0.0.1:{daemon.get_json('/v1/status')['components']['grpc']['port']}"


@pytest.fixture
def client(daemon: Daemon) -> Iterator[triton.InferenceServerClient]:
    client = triton.InferenceServerClient(_grpc_url(daemon))
    try:
        yield client
    finally:
        client.close()


def _x(array: np.ndarray, name: str = "x") -> list[triton.InferInput]:
    tensor = triton.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array.astype(np.float32))
    return [tensor]


def _failure(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        call()
    return err.value


def test_grpc_serves_the_same_models_as_http(
    daemon: Daemon, client: triton.InferenceServerClient
) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("double")
    meta = client.get_model_metadata("double", as_json=True)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}]
    assert daemon.get_json("/v2/models/double")["inputs"][0]["shape"] == [-1, 4]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = client.infer("double", _x(x))
    np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
    assert result.get_response().model_version == "1"
    stats = daemon.get_json("/v2/models/double/stats")["model_stats"][0]
    assert stats["inference_count"] >= 1  # one metrics registry for both transports


def _http_error(daemon: Daemon, model: str, doc: Mapping[str, object]) -> tuple[int, str]:
    request = urllib.request.Request(f"{daemon.url}/v2/models/{model}/infer",
                                     data=json.dumps(doc).encode())  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    return err.value.code, json.loads(err.value.read())["error"]


@pytest.mark.parametrize(("shape", "datatype"), [((1, 5), "FP32"), ((1, 4), "FP64")])
def test_wrong_tensor_is_invalid_argument_with_the_http_message(
    daemon: Daemon, client: triton.InferenceServerClient, shape: tuple[int, int], datatype: str
) -> None:
    x = np.ones(shape)
    tensor = triton.InferInput("x", list(shape), datatype)
    tensor.set_data_from_numpy(x.astype(np.float32 if datatype == "FP32" else np.float64))
    err = _failure(lambda: client.infer("double", [tensor]))
    doc = {"inputs": [{"name": "x", "datatype": datatype, "shape": list(shape),
                       "data": x.ravel().tolist()}]}  # fmt: skip
    assert (err.status(), err.message()) == (
        "StatusCode.INVALID_ARGUMENT", _http_error(daemon, "double", doc)[1])  # fmt: skip
    assert "input 'x': expected" in err.message()


def test_unknown_model_is_not_found(client: triton.InferenceServerClient) -> None:
    err = _failure(lambda: client.infer("nope", _x(np.ones((1, 4)))))
    assert err.status() == "StatusCode.NOT_FOUND"
    assert not client.is_model_ready("nope")


def test_grpc_deadline_stops_the_run_and_overload_is_unavailable(
    daemon: Daemon, client: triton.InferenceServerClient
) -> None:
    x = np.ones((1, 4))
    cancelled = 'wasmgate_runs_cancelled_total{model="slow"}'
    before = daemon.metric(cancelled)
    holder = threading.Thread(
        target=lambda: _failure(lambda: client.infer("slow", _x(x), client_timeout=3.0))
    )
    holder.start()
    slot = 'wasmgate_in_flight{name="slow"}'
    # the one slot is taken: the next request is refused, not queued
    until(lambda: daemon.metric(slot) >= 1 or not holder.is_alive(), "the slow call in flight")
    assert holder.is_alive(), "the slow call ended before it was seen in flight"
    busy = _failure(lambda: client.infer("slow", _x(x), client_timeout=30.0))
    holder.join()
    assert busy.status() == "StatusCode.UNAVAILABLE", busy.message()
    # The deadline stopped the native run (the watchdog), not merely the answer:
    until(
        lambda: daemon.metric(cancelled) > before,
        "the slow run cancelled at its gRPC deadline",
        60,
    )
    until(lambda: daemon.metric(slot) == 0, "the slow model's slot freed", 60)
    # The V2 timeout parameter is a server-side deadline too: the daemon answers it.
    late = _failure(lambda: client.infer("slow", _x(x), timeout=300_000))
    assert late.status() == "StatusCode.DEADLINE_EXCEEDED", late.message()
    np.testing.assert_array_equal(client.infer("double", _x(x)).as_numpy("y"), x * 2)


def test_huge_message_is_refused_clearly(
    daemon: Daemon, client: triton.InferenceServerClient
) -> None:
    huge = np.ones((MAX_MESSAGE // 8, 4))  # twice grpc.max_message_bytes
    err = _failure(lambda: client.infer("double", _x(huge)))
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert "larger than max" in err.message()
    assert client.is_server_live()


def _garbage(port: int) -> None:
    for junk in (b"\x00\xff" * 5000, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x08" * 100):  # fmt: skip
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(junk)
            sock.settimeout(2)
            try:
                while sock.recv(4096):
                    pass
            except (TimeoutError, ConnectionError):
                pass


def test_http_keeps_serving_while_grpc_clients_misbehave(
    daemon: Daemon, client: triton.InferenceServerClient
) -> None:
    port = int(_grpc_url(daemon).rsplit(":", 1)[1])
    stalled = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    try:
        _garbage(port)
        with urllib.request.urlopen(f"{daemon.url}/v2/health/ready", timeout=10) as r:
            assert r.status == 200
        x = np.ones((1, 4))
        np.testing.assert_array_equal(client.infer("double", _x(x)).as_numpy("y"), x * 2)
    finally:
        for sock in stalled:
            sock.close()
    assert daemon.proc is not None
    assert daemon.proc.poll() is None


def test_sigterm_lets_the_grpc_call_in_flight_finish(tmp_path: Path) -> None:
    port = free_port()
    # about a second of MatMuls, several on a loaded machine: a deadline they always meet
    daemon = _start(tmp_path, {"port": port}, slow_runs=300, drain_s=60, slow_deadline_ms=60_000)
    client = triton.InferenceServerClient(f"127.0.0.1:{port}")
    x = np.full((1, 4), 3.0)
    answers: list[np.ndarray] = []
    try:
        caller = threading.Thread(
            target=lambda: answers.append(client.infer("slow", _x(x)).as_numpy("y"))
        )
        caller.start()
        slot = 'wasmgate_in_flight{name="slow"}'
        until(lambda: daemon.metric(slot) >= 1 or not caller.is_alive(), "the call in flight")
        assert caller.is_alive(), "the call ended before it was seen in flight"
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        late = _failure(lambda: client.infer("double", _x(x), client_timeout=10))
        # Refused, never served: UNAVAILABLE from the draining service (or connection
        # refused), CANCELLED from grpc for a call racing the listener's GOAWAY.
        assert late.status() in {"StatusCode.UNAVAILABLE", "StatusCode.CANCELLED"}
        caller.join(60)
        assert len(answers) == 1, daemon.log()[-3000:]
        np.testing.assert_array_equal(answers[0], x)
        assert daemon.proc.wait(60) == 0
    finally:
        client.close()
        daemon.kill()


def test_grpc_is_off_and_never_imported_by_default(tmp_path: Path) -> None:
    daemon = _start(tmp_path, None)
    try:
        assert "grpc" not in daemon.get_json("/v1/status")["components"]
        assert daemon.proc is not None
        maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
        assert "cygrpc" not in maps  # grpc's native core was never loaded
    finally:
        daemon.stop()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import wasmgate.runtime.compose.daemon"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in done.stderr.splitlines()]
    assert "wasmgate.runtime.compose.app" in imported
    assert not [
        m for m in imported if m == "grpc" or m.startswith(("grpc.", "wasmgate.runtime.grpc"))
    ]


def test_grpc_port_in_use_is_a_clear_start_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"cannot listen on 127.0.0.1:{port} for gRPC"):
            _start(tmp_path, {"port": port})

"""Triton's clients, unmodified, against a real ``wasmgate serve``: string tensors on an ONNX
model, raw gRPC outputs, Triton's error texts and the model repository extension, over HTTP
(JSON and binary) and gRPC, with the attacks on each.

One daemon (HTTP with a management token, gRPC) serves ``text`` (two string inputs:
Identity and Cast string -> int64, generated here), ``double`` (y = 2x), ``slow`` (about a
second per run) and the adapter ``probe``.
"""

from __future__ import annotations

import functools
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.runtime.bundlekit import BundleKit, slow_model, write_text_model
from tests.runtime.stack import host_profile_name

TOKEN = "s3cret-token-for-tests"
AUTH = {"authorization": f"Bearer {TOKEN}"}
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TEXT_IO = (
    [{"name": n, "datatype": "BYTES", "shape": [-1]} for n in ("words", "digits")],
    [{"name": "same", "datatype": "BYTES", "shape": [-1]},
     {"name": "number", "datatype": "INT64", "shape": [-1]}],
)  # fmt: skip
WORDS = np.array(["grüße".encode(), b"", "µs \x00 ok".encode(), b"x" * 300], dtype=np.object_)
DIGITS = np.array([b"12", b"-3", b"9223372036854775807"], dtype=np.object_)
Array = npt.NDArray[Any]
Client = Any  # tritonclient's HTTP or gRPC client (the package has no type information)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("dropin")
    kit = BundleKit(root / "kit")
    bundles = root / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    text = write_text_model(kit.root / "text.onnx")
    one = {"max_batch_size": 1, "max_queue_delay_us": 0}
    kit.build("texts", 1, adapter=False, model_name="text", model_file=text, io=TEXT_IO,
              batching=one, out_dir=bundles)  # fmt: skip
    kit.build("quiet", 1, adapter=False, model_name="double", out_dir=bundles)
    slow = kit.root / "slow.onnx"
    slow.write_bytes(slow_model(300))
    kit.build("abuser", 1, adapter=False, model_name="slow", model_file=slow, batching=one,
              out_dir=bundles)  # fmt: skip
    kit.build("probe", 1, model=False, out_dir=bundles)
    config = {
        "paths": {"trust_file": kit.save_trust(root / "trust.json")},
        "profile": host_profile_name(),
        "http": {"management_token": TOKEN},
        "grpc": {"port": free_port()},
    }
    started = Daemon(root / "d", config)
    started.start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def http(daemon: Daemon) -> Iterator[thttp.InferenceServerClient]:
    client = thttp.InferenceServerClient(daemon.url.removeprefix("http://"))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def grpc(daemon: Daemon) -> Iterator[tgrpc.InferenceServerClient]:
    port = daemon.get_json("/v1/status")["components"]["grpc"]["port"]
    client = tgrpc.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        yield client
    finally:
        client.close()


def _inputs(module: Any, arrays: dict[str, Array], binary: bool = True) -> list[Any]:
    tensors = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == np.object_ else "FP32"
        tensor = module.InferInput(name, list(array.shape), datatype)
        if module is thttp:
            tensor.set_data_from_numpy(array, binary_data=binary)
        else:
            tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def _failure(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        call()
    return err.value


def _post(daemon: Daemon, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(f"{daemon.url}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]


# -- string tensors ---------------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_string_tensors_over_http(http: thttp.InferenceServerClient, binary: bool) -> None:
    outputs = [thttp.InferRequestedOutput(n, binary_data=binary) for n in ("same", "number")]
    result = http.infer("text", _inputs(thttp, {"words": WORDS, "digits": DIGITS}, binary),
                        outputs=outputs)  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("number"), [12, -3, 2**63 - 1])
    # JSON strings come back as str (tritonclient's reading of JSON data), binary as bytes.
    want = WORDS if binary else np.array([w.decode() for w in WORDS], dtype=np.object_)
    np.testing.assert_array_equal(result.as_numpy("same"), want)


def test_string_tensors_over_grpc_come_back_raw(grpc: tgrpc.InferenceServerClient) -> None:
    result = grpc.infer("text", _inputs(tgrpc, {"words": WORDS, "digits": DIGITS}))
    response = result.get_response()
    assert len(response.raw_output_contents) == len(response.outputs) == 2  # as Triton sends
    assert not any(o.contents.ListFields() for o in response.outputs)
    np.testing.assert_array_equal(result.as_numpy("number"), [12, -3, 2**63 - 1])
    np.testing.assert_array_equal(result.as_numpy("same"), WORDS)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    doubled = grpc.infer("double", _inputs(tgrpc, {"x": x}))
    assert len(doubled.get_response().raw_output_contents) == 1
    np.testing.assert_array_equal(doubled.as_numpy("y"), x * 2)


def test_invalid_utf8_is_a_400_naming_the_input(
    http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient
) -> None:
    bad = np.array([b"ok", b"\xff\xfe"], dtype=np.object_)
    arrays = {"words": bad, "digits": DIGITS}
    want = "input 'words': BYTES element 1 is not UTF-8 text"
    over_http = _failure(lambda: http.infer("text", _inputs(thttp, arrays)))
    assert (over_http.status(), want in over_http.message()) == ("400", True), over_http
    over_grpc = _failure(lambda: grpc.infer("text", _inputs(tgrpc, arrays)))
    assert over_grpc.status() == "StatusCode.INVALID_ARGUMENT"
    assert over_grpc.message() == over_http.message()


@pytest.mark.parametrize(
    ("data", "shape", "message"),
    [
        ([1, 2], [2], "BYTES elements in JSON must be strings"),
        (["\ud800"], [1], "is not valid text"),
        ([float("nan")], [1], "BYTES elements in JSON must be strings"),
        ([[["a"]], ["b", ["c"]]], [2], "needs 2 elements"),
        (["a"], [2**40], "out of range"),
    ],
    ids=["numbers", "lone-surrogate", "nan", "nested", "huge-shape"],
)
def test_hostile_string_json_is_refused_with_one_line(
    daemon: Daemon, data: list[Any], shape: list[int], message: str
) -> None:
    words = {"name": "words", "datatype": "BYTES", "shape": shape, "data": data}
    doc = {"inputs": [words, {"name": "digits", "datatype": "BYTES", "shape": [1], "data": ["1"]}]}
    status, error = _post(daemon, "/v2/models/text/infer", json.dumps(doc).encode(), {})
    assert (status, message in error, "\n" in error) == (400, True, False), error


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            (
                b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], '
                b'"data": [1e39, 0, 0, 0]}]}'
            ),
            "FP32 data cannot hold values like [1e+39]",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": '
            + b"[" * 5000
            + b"]" * 5000
            + b"}]}",
            "nested too deeply",
        ),
    ],
    ids=["huge-number", "deep-nesting"],
)
def test_hostile_numbers_are_refused(daemon: Daemon, body: bytes, message: str) -> None:
    status, error = _post(daemon, "/v2/models/double/infer", body, {})
    assert (status, message in error) == (400, True), error


def test_nan_and_inf_pass_through_a_float_model(grpc: tgrpc.InferenceServerClient) -> None:
    x = np.array([[np.nan, np.inf, -np.inf, 1.0]], dtype=np.float32)
    np.testing.assert_array_equal(
        grpc.infer("double", _inputs(tgrpc, {"x": x})).as_numpy("y"), x * 2
    )


# -- error texts ------------------------------------------------------------------------


@pytest.mark.parametrize("module", [thttp, tgrpc], ids=["http", "grpc"])
def test_unknown_model_and_version_start_like_triton(
    http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient, module: Any
) -> None:
    client: Client = http if module is thttp else grpc
    x = {"x": np.zeros((1, 4), np.float32)}
    for call in (lambda: client.get_model_metadata("ghost"),
                 lambda: client.infer("ghost", _inputs(module, x))):  # fmt: skip
        message = _failure(call).message()
        assert message.startswith("Request for unknown model: 'ghost' is not found ("), message
    err = _failure(lambda: client.infer("double", _inputs(module, x), model_version="9"))
    assert err.message().startswith(
        "Request for unknown model: 'double' version 9 is not found (bundle 'quiet': serving 1"
    ), err.message()
    assert err.status() in ("404", "StatusCode.NOT_FOUND")


# -- the model repository extension ----------------------------------------------------


def _index(client: Client, **kwargs: Any) -> dict[str, tuple[str, str, str]]:
    if isinstance(client, tgrpc.InferenceServerClient):
        rows = client.get_model_repository_index(as_json=True, **kwargs).get("models", [])
    else:
        rows = client.get_model_repository_index(**kwargs)
    return {r["name"]: (r["version"], r.get("state", ""), r.get("reason", "")) for r in rows}


def test_repository_calls_need_the_management_token(
    http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient
) -> None:
    wrong = {"authorization": "Bearer nope"}
    basic = {"authorization": "Basic " + TOKEN}
    calls: list[Callable[[], object]] = [
        lambda: http.unload_model("double"),
        http.get_model_repository_index,
        lambda: http.unload_model("double", headers=wrong),
    ]
    for call in calls:
        err = _failure(call)
        assert (err.status(), "bearer token" in err.message()) == ("401", True), err
    calls = [
        lambda: grpc.unload_model("double"),
        grpc.get_model_repository_index,
        lambda: grpc.load_model("double", headers=basic),
    ]
    for call in calls:
        assert _failure(call).status() == "StatusCode.UNAUTHENTICATED"
    assert http.is_model_ready("double")  # nothing changed


def test_index_lists_models_and_adapters_with_their_state(
    http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient
) -> None:
    want = dict.fromkeys(("double", "probe", "slow", "text"), ("1", "READY", ""))
    assert _index(http, headers=AUTH) == want
    assert _index(grpc, headers=AUTH) == want


def test_unload_and_load_over_both_transports(
    daemon: Daemon, http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient
) -> None:
    x = {"x": np.ones((1, 4), np.float32)}
    http.unload_model("double", headers=AUTH)
    try:
        assert not http.is_model_ready("double")
        assert not grpc.is_model_ready("double")
        for module, client in ((thttp, http), (tgrpc, grpc)):
            err = _failure(functools.partial(client.infer, "double", _inputs(module, x)))
            assert err.message().startswith(
                "Request for unknown model: 'double' has no available versions (unloaded"
            ), err.message()
            assert err.status() in ("503", "StatusCode.UNAVAILABLE")
        state = _index(grpc, headers=AUTH)["double"]
        assert state[:2] == ("1", "UNAVAILABLE")
        assert "unloaded" in state[2]
        assert _index(http, headers=AUTH)["text"][1] == "READY"
        status, body = _post(daemon, "/v2/repository/index", b'{"ready": true}', HEADERS)
        assert status == 200
        assert sorted(r["name"] for r in json.loads(body)) == ["probe", "slow", "text"]
    finally:
        grpc.load_model("double", headers=AUTH)
    assert http.is_model_ready("double")
    np.testing.assert_array_equal(http.infer("double", _inputs(thttp, x)).as_numpy("y"), 2 * x["x"])


def test_an_unloaded_adapter_stops_answering(
    daemon: Daemon, grpc: tgrpc.InferenceServerClient
) -> None:
    grpc.unload_model("probe", headers=AUTH)
    try:
        status, error = _post(daemon, "/v1/adapters/probe", b"Px", {})
        assert (status, error.startswith("Request for unknown model: 'probe' has no")) == (
            503,
            True,
        )
    finally:
        grpc.load_model("probe", headers=AUTH)
    assert _post(daemon, "/v1/adapters/probe", b"Px", {})[0] == 200


def test_load_of_an_unknown_name_or_with_a_config_is_refused(
    http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient
) -> None:
    err = _failure(lambda: http.load_model("ghost", headers=AUTH))
    assert err.status() == "404"
    assert err.message().startswith("Request for unknown model: 'ghost' is not found")
    assert _failure(lambda: grpc.unload_model("ghost", headers=AUTH)).status() == (
        "StatusCode.NOT_FOUND")  # fmt: skip
    config = json.dumps({"max_batch_size": 64})
    err = _failure(lambda: grpc.load_model("double", headers=AUTH, config=config))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "signed bundle" in err.message()


def _metric(daemon: Daemon, series: str) -> float:
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return next((float(ln.split()[-1]) for ln in lines if ln.startswith(series + " ")), 0.0)


def test_unload_lets_the_requests_in_flight_finish(
    daemon: Daemon, http: thttp.InferenceServerClient, grpc: tgrpc.InferenceServerClient
) -> None:
    x = np.full((1, 4), 3, np.float32)
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(grpc.infer("slow", _inputs(tgrpc, {"x": x})).as_numpy("y"))
    )
    worker.start()
    while _metric(daemon, 'wasmgate_in_flight{name="slow"}') < 1:  # the run has started
        assert worker.is_alive()
    http.unload_model("slow", headers=AUTH)
    try:
        assert worker.is_alive()  # the run (about a second) was in flight at the unload
        err = _failure(lambda: http.infer("slow", _inputs(thttp, {"x": x})))
        assert err.status() == "503"
        worker.join(timeout=60)
        assert len(done) == 1
        np.testing.assert_array_equal(done[0], x)
    finally:
        http.load_model("slow", headers=AUTH)

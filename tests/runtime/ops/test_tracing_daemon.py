"""Traces end to end against a real daemon: W3C trace context in over HTTP and MQTT 5, spans
per stage out over OTLP/HTTP to a collector-free receiver, the context on to the cloud.

The bundle is the ``probe`` guest: ``M`` runs model ``double`` through wasi-nn, ``F`` asks
for cloud fallback. The cloud is a loopback app that records the headers it gets.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web
from tritonclient.grpc import service_pb2 as tpb
from tritonclient.grpc import service_pb2_grpc as tstub

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port, serving
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan
from tests.runtime.bundlekit import BundleKit
from tests.runtime.mqtt.requester import Requester
from tests.runtime.stack import host_profile_name

FALLBACK = {"allowed": True, "on_adapter_request": True, "send_payload": True}
CLOUD_ANSWER = b'{"outputs":[{"name":"answer","datatype":"BYTES","shape":[1],"data":["cloud"]}]}'
ROOT = "wasmgate/v1/gw-trace"
SERVER, CLIENT = 2, 3  # OTLP Span.SpanKind
V2_ADAPTER = b'{"inputs":[{"name":"payload","datatype":"BYTES","shape":[1],"data":["Pv2"]}]}'


def traceparent() -> tuple[str, str, str]:
    """(header, trace id, span id) of a new sampled W3C traceparent."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, Any]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


class RecordingCloud:
    """A V2 endpoint answering every adapter call ``cloud``; keeps each request's headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        return web.Response(body=CLOUD_ANSWER, content_type="application/json")


def start_daemon(
    factory: Callable[..., Daemon], tmp: Path, name: str = "d", **config: object
) -> Daemon:
    """A daemon (work dir ``tmp/name``, as ``daemon_factory`` makes it) serving ``probe``."""
    kit = BundleKit(tmp / f"kit-{name}")
    bundles = tmp / name / "data" / "bundles"
    bundles.mkdir(parents=True)
    kit.build("probe", 1, out_dir=bundles, sections={"fallback": FALLBACK})
    settings = {
        "paths": {"trust_file": kit.save_trust(tmp / f"trust-{name}.json")},
        "profile": host_profile_name(),
        **config,
    }
    return factory(config=settings, name=name)


def of_trace(spans: list[ReceivedSpan], trace_id: str) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans if s.trace_id == trace_id}


def has(*names: str, trace_id: str) -> Callable[[list[ReceivedSpan]], bool]:
    return lambda spans: set(names) <= set(of_trace(spans, trace_id))


def ancestors(span: ReceivedSpan, spans: dict[str, ReceivedSpan]) -> list[str]:
    by_id = {s.span_id: s for s in spans.values()}
    names: list[str] = []
    parent = by_id.get(span.parent_id)
    while parent is not None and len(names) < 20:
        names.append(parent.name)
        parent = by_id.get(parent.parent_id)
    return names


@pytest.fixture
def receiver() -> Iterator[tuple[OtlpReceiver, str]]:
    otlp = OtlpReceiver()
    with serving(otlp.app()) as url:
        yield otlp, url


@pytest.fixture
def cloud() -> Iterator[tuple[RecordingCloud, str]]:
    recording = RecordingCloud()
    with serving(recording.app()) as url:
        yield recording, url


TELEMETRY = {"export_delay_ms": 100, "export_timeout_s": 2}


def test_http_request_spans_share_its_trace_and_reach_the_cloud(
    tmp_path: Path,
    daemon_factory: Callable[..., Daemon],
    receiver: tuple[OtlpReceiver, str],
    cloud: tuple[RecordingCloud, str],
) -> None:
    otlp, otlp_url = receiver
    recording, cloud_url = cloud
    telemetry = {"otlp_endpoint": otlp_url, **TELEMETRY}
    daemon = start_daemon(daemon_factory, tmp_path, telemetry=telemetry, cloud={"url": cloud_url})
    url = f"{daemon.url}/v1/adapters/probe"

    header, trace_id, remote = traceparent()
    status, body, headers = post(url, b"M", {"traceparent": header, "tracestate": "v=1"})
    assert (status, body) == (200, b"v1:2,4,6,8")
    assert "Server-Timing" in headers  # the sandbox's own timing is still there
    answered = headers["traceparent"].split("-")
    assert answered[1] == trace_id  # same trace, our receive span as the parent to be
    assert headers["tracestate"] == "v=1"

    names = ("http receive", "admission", "sandbox", "wasi-nn compute", "backend")
    spans = of_trace(otlp.wait_for(has(*names, trace_id=trace_id)), trace_id)
    receive = spans["http receive"]
    assert (receive.parent_id, receive.kind, answered[2]) == (remote, SERVER, receive.span_id)
    assert receive.attributes["http.response.status_code"] == 200
    assert receive.attributes["wasmgate.model"] == "probe"
    assert receive.resource["service.name"] == "wasmgate"
    assert "wasmgate.gateway.id" in receive.resource
    assert spans["admission"].parent_id == receive.span_id
    assert spans["sandbox"].parent_id == receive.span_id
    assert spans["sandbox"].attributes["wasmgate.guest.status"] == 0
    assert spans["wasi-nn compute"].parent_id == spans["sandbox"].span_id
    assert spans["wasi-nn compute"].attributes["wasmgate.model"] == "double"
    backend = spans["backend"]
    assert ancestors(backend, spans)[-3:] == ["wasi-nn compute", "sandbox", "http receive"]
    assert backend.attributes["wasmgate.backend"] == "onnx"

    header, trace_id, _ = traceparent()
    status, body, headers = post(url, b"F", {"traceparent": header})
    assert (status, body, headers["X-Wasmgate-Source"]) == (200, b"cloud", "cloud")
    spans = of_trace(otlp.wait_for(has("fallback", trace_id=trace_id)), trace_id)
    fallback = spans["fallback"]
    assert (fallback.parent_id, fallback.kind) == (spans["http receive"].span_id, CLIENT)
    assert fallback.attributes["wasmgate.fallback.reason"] == "low confidence"
    sent = recording.headers[-1]["traceparent"].split("-")
    assert (sent[1], sent[2]) == (trace_id, fallback.span_id)


def test_a_malformed_traceparent_starts_a_new_trace(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], receiver: tuple[OtlpReceiver, str]
) -> None:
    otlp, otlp_url = receiver
    daemon = start_daemon(
        daemon_factory, tmp_path, telemetry={"otlp_endpoint": otlp_url, **TELEMETRY}
    )
    url = f"{daemon.url}/v1/adapters/probe"
    bad = [
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # all-zero trace id is invalid
        "00-xyz-abc-01",
        "ff-" + "a" * 32 + "-" + "b" * 16 + "-01",  # version ff is forbidden
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01-extra",
        "\u00e9" * 55,
    ]
    for header in bad:
        status, body, headers = post(url, b"Pok", {"traceparent": header})
        assert (status, body) == (200, b"v1:ok"), header
        fresh = headers["traceparent"]
        assert fresh != header
        trace_id = fresh.split("-")[1]
        spans = of_trace(otlp.wait_for(has("http receive", trace_id=trace_id)), trace_id)
        assert spans["http receive"].parent_id == ""  # a root: nothing of the bad header


def test_tracing_off_passes_an_incoming_traceparent_through_only(
    tmp_path: Path,
    daemon_factory: Callable[..., Daemon],
    cloud: tuple[RecordingCloud, str],
) -> None:
    recording, cloud_url = cloud
    daemon = start_daemon(daemon_factory, tmp_path, cloud={"url": cloud_url})
    url = f"{daemon.url}/v1/adapters/probe"
    status, _, headers = post(url, b"F", {})
    assert status == 200
    assert "traceparent" not in headers
    assert "traceparent" not in recording.headers[-1]
    header, _, _ = traceparent()
    status, _, headers = post(url, b"F", {"traceparent": header, "tracestate": "k=v"})
    assert (status, headers["traceparent"], headers["tracestate"]) == (200, header, "k=v")
    assert recording.headers[-1]["traceparent"] == header
    status, _, headers = post(url, b"Px", {"traceparent": "not-a-traceparent"})
    assert status == 200
    assert "traceparent" not in headers  # ignored, not echoed


def test_a_dead_or_slow_receiver_never_fails_requests(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    slow = OtlpReceiver(delay_s=5)
    with serving(slow.app()) as slow_url:
        for name, endpoint in (("slow", slow_url), ("dead", f"http://127.0.0.1:{free_port()}")):
            telemetry = {**TELEMETRY, "otlp_endpoint": endpoint, "max_queue_spans": 4}
            daemon = start_daemon(daemon_factory, tmp_path, name, telemetry=telemetry)
            for i in range(40):  # ~6 spans each: far more than the queue holds
                header, _, _ = traceparent()
                status, body, _ = post(
                    f"{daemon.url}/v1/adapters/probe", b"M", {"traceparent": header}
                )
                assert (status, body) == (200, b"v1:2,4,6,8"), (name, i)
            assert daemon.stop() == 0  # the final flush gives up: it does not hang the exit


async def test_mqtt5_traceparent_comes_back_on_the_answer_with_spans(
    tmp_path: Path,
    mosquitto: Broker,
    daemon_factory: Callable[..., Daemon],
    receiver: tuple[OtlpReceiver, str],
) -> None:
    otlp, otlp_url = receiver
    mqtt = {"host": mosquitto.host, "port": mosquitto.port, "gateway_id": "gw-trace"}
    start_daemon(
        daemon_factory, tmp_path, mqtt=mqtt, telemetry={"otlp_endpoint": otlp_url, **TELEMETRY}
    )
    header, trace_id, remote = traceparent()
    with Requester(mosquitto.port).connect("replies/#", f"{ROOT}/status") as dev:
        # HTTP readiness does not wait for the broker: the daemon publishes "online" once
        # it has subscribed, and a request sent before that would be lost.
        (status,) = await dev.wait_for(1, timeout=60)
        assert (status.topic, status.payload) == (f"{ROOT}/status", b"online")
        dev.request(
            f"{ROOT}/adapters/probe/req", b"M", response_topic="replies/1",
            correlation=b"c1", user=[("traceparent", header), ("tracestate", "m=1")],
        )  # fmt: skip
        dev.request(f"{ROOT}/adapters/probe/req", b"Pplain", response_topic="replies/2")
        dev.request(
            f"{ROOT}/adapters/probe/req", b"Pbad", response_topic="replies/3",
            user=[("traceparent", f"00-{trace_id}-{'0' * 16}-01")],  # zero span id: invalid
        )  # fmt: skip
        replies = {r.topic: r for r in await dev.wait_for(4, timeout=60)}
    traced, plain, bad = replies["replies/1"], replies["replies/2"], replies["replies/3"]
    assert (bad.payload, bad.props["status"]) == (b"v1:bad", "200")
    assert bad.props["traceparent"].split("-")[1] != trace_id  # ignored: a new trace
    assert (traced.payload, traced.props["status"]) == (b"v1:2,4,6,8", "200")
    assert traced.props["traceparent"].split("-")[1] == trace_id
    assert traced.props["tracestate"] == "m=1"
    assert plain.props["traceparent"].split("-")[1] != trace_id  # a trace of its own

    names = ("mqtt receive", "sandbox", "wasi-nn compute", "backend")
    spans = of_trace(otlp.wait_for(has(*names, trace_id=trace_id)), trace_id)
    receive = spans["mqtt receive"]
    assert (receive.parent_id, receive.kind) == (remote, SERVER)
    assert receive.span_id == traced.props["traceparent"].split("-")[2]
    assert receive.attributes["wasmgate.status"] == 200
    assert spans["sandbox"].parent_id == receive.span_id


def test_error_answers_and_v2_adapter_calls_stay_in_their_trace(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], receiver: tuple[OtlpReceiver, str]
) -> None:
    otlp, otlp_url = receiver
    daemon = start_daemon(
        daemon_factory, tmp_path, telemetry={"otlp_endpoint": otlp_url, **TELEMETRY}
    )
    cases = [
        ("/v1/adapters/probe", b"B", 400, 0),  # the client's fault: not the span's error
        ("/v1/adapters/probe", b"T", 500, 2),  # a trap: the receive and sandbox spans fail
        ("/v1/adapters/nothing", b"M", 404, 0),
        ("/v2/models/probe/infer", V2_ADAPTER, 200, 0),  # the adapter as a V2 model
    ]
    for path, body, code, span_status in cases:
        header, trace_id, remote = traceparent()
        status, _, headers = post(f"{daemon.url}{path}", body, {"traceparent": header})
        assert status == code, path
        assert headers["traceparent"].split("-")[1] == trace_id, path  # errors answer it too
        spans = of_trace(otlp.wait_for(has("http receive", trace_id=trace_id)), trace_id)
        receive = spans["http receive"]
        assert (receive.parent_id, receive.status) == (remote, span_status), path
        assert receive.attributes["http.response.status_code"] == code
        if body != b"M":
            sandbox = of_trace(otlp.wait_for(has("sandbox", trace_id=trace_id)), trace_id)
            assert sandbox["sandbox"].parent_id == receive.span_id
            assert sandbox["sandbox"].status == span_status


def test_grpc_metadata_traceparent_comes_back_in_trailing_metadata(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], receiver: tuple[OtlpReceiver, str]
) -> None:
    otlp, otlp_url = receiver
    port = free_port()
    start_daemon(
        daemon_factory, tmp_path, grpc={"port": port},
        telemetry={"otlp_endpoint": otlp_url, **TELEMETRY},
    )  # fmt: skip
    request = tpb.ModelInferRequest(model_name="probe")
    tensor = request.inputs.add(name="payload", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"M")
    missing = tpb.ModelInferRequest(model_name="nothing")
    header, trace_id, remote = traceparent()
    bad_header, bad_trace, _ = traceparent()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = tstub.GRPCInferenceServiceStub(channel)
        answer, call = stub.ModelInfer.with_call(
            request, metadata=[("traceparent", header)], timeout=60
        )
        # Outputs come raw, as Triton sends them: a BYTES element is length-prefixed.
        assert answer.raw_output_contents[0] == len(b"v1:2,4,6,8").to_bytes(4, "little") + (
            b"v1:2,4,6,8"
        )
        sent = dict(call.trailing_metadata())["traceparent"].split("-")
        assert sent[1] == trace_id
        with pytest.raises(grpc.RpcError) as err:  # an error answer carries it too
            stub.ModelInfer(missing, metadata=[("traceparent", bad_header)], timeout=60)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert dict(err.value.trailing_metadata())["traceparent"].split("-")[1] == bad_trace
    names = ("grpc receive", "sandbox", "wasi-nn compute", "backend")
    spans = of_trace(otlp.wait_for(has(*names, trace_id=trace_id)), trace_id)
    receive = spans["grpc receive"]
    assert (receive.parent_id, receive.span_id, receive.kind) == (remote, sent[2], SERVER)
    assert (receive.attributes["wasmgate.status"], receive.status) == (200, 0)
    assert spans["sandbox"].parent_id == receive.span_id
    refused = of_trace(otlp.wait_for(has("grpc receive", trace_id=bad_trace)), bad_trace)
    not_found = refused["grpc receive"]
    assert (not_found.attributes["wasmgate.status"], not_found.status) == (404, 0)

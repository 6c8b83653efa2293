"""One table of V2 cases through HTTP, gRPC and MQTT against one real daemon, then overload
(a looping request holds the one slot) on each.

Each case is sent over every transport that can express it; all of them must answer with
the same status (gRPC: the code the error table gives that status), and afterwards each
transport's series in ``/metrics`` (answered by source, failed by error label) must be the
same, under its own ``transport`` label. This held for none of the drifts the data plane
removed: gRPC counted as ``http``, MQTT ignoring the V2 ``timeout`` parameter and the
canary-key cap, MQTT's own error labels, adapters not being V2 models over MQTT.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import msgspec
import pytest
from aiohttp import web
from tritonclient.grpc import service_pb2 as tpb
from tritonclient.grpc import service_pb2_grpc as tstub

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port, serving
from tests.runtime.edges.probe import probe_daemon
from tests.runtime.mqtt.requester import Requester
from wasmgate.runtime.protocol.error_table import TABLE

GW = "gw-conf"
LONG_KEY = "k" * 257


class Case(msgspec.Struct, frozen=True):
    name: str
    model: str
    datatype: str
    shape: list[int]
    data: list[Any]
    status: int
    parameters: dict[str, Any] = {}
    key: str | None = None
    pin: str | None = None
    timeout_ms: str | None = None
    """The transport's own timeout (HTTP header, MQTT user property; gRPC has none)."""


X = [1.0, 2.0, 3.0, 4.0]
CASES = [
    Case("ok", "double", "FP32", [1, 4], X, 200),
    Case("adapter as a V2 model", "probe", "BYTES", [1], ["Phi"], 200),
    Case("adapter error", "probe", "BYTES", [1], ["E"], 500),
    Case("adapter asks the cloud", "probe", "BYTES", [1], ["F"], 200),
    Case("unknown model", "nope", "FP32", [1, 4], X, 404),
    Case("wrong shape", "double", "FP32", [1, 3], X[:3], 400),
    Case("wrong datatype", "double", "INT32", [1, 4], [1, 2, 3, 4], 400),
    Case("negative timeout parameter", "double", "FP32", [1, 4], X, 400, {"timeout": -5}),
    Case("huge timeout parameter", "double", "FP32", [1, 4], X, 400, {"timeout": 10**30}),
    Case("nan timeout parameter", "double", "FP32", [1, 4], X, 400, {"timeout": "nan"}),
    Case("deadline exceeded", "double", "FP32", [1, 4], X, 504, {"timeout": 1}),
    Case("nan timeout of the transport", "double", "FP32", [1, 4], X, 400, timeout_ms="nan"),
    Case("negative timeout of the transport", "double", "FP32", [1, 4], X, 400, timeout_ms="-1"),
    Case("over-long canary key", "double", "FP32", [1, 4], X, 400, key=LONG_KEY),
    Case("canary key", "double", "FP32", [1, 4], X, 200, key="device-7"),
    Case("pinned version", "double", "FP32", [1, 4], X, 200, pin="1"),
    Case("bad pinned version", "double", "FP32", [1, 4], X, 400, pin="one"),
]


def body(case: Case) -> bytes:
    tensor = {"name": "x", "datatype": case.datatype, "shape": case.shape, "data": case.data}
    if case.datatype == "BYTES":
        tensor["name"] = "payload"
    return json.dumps({"inputs": [tensor], "parameters": case.parameters}).encode()


def over_http(daemon: Daemon, case: Case) -> int:
    headers = {"Content-Type": "application/json"}
    if case.key is not None:
        headers["X-Wasmgate-Canary-Key"] = case.key
    if case.pin is not None:
        headers["X-Wasmgate-Version"] = case.pin
    if case.timeout_ms is not None:
        headers["X-Wasmgate-Timeout-Ms"] = case.timeout_ms
    url = f"{daemon.url}/v2/models/{case.model}/infer"
    req = urllib.request.Request(url, data=body(case), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


GRPC_STATUS = {"OK": {200}} | {
    code: {s.status for s in TABLE.values() if s.grpc == code}
    for code in {s.grpc for s in TABLE.values()}
}
GRPC_STATUS["INTERNAL"] = GRPC_STATUS.get("INTERNAL", set()) | {500}


def grpc_request(case: Case) -> tpb.ModelInferRequest:
    request = tpb.ModelInferRequest(model_name=case.model)
    name = "payload" if case.datatype == "BYTES" else "x"
    tensor = request.inputs.add(name=name, datatype=case.datatype, shape=case.shape)
    if case.datatype == "FP32":
        tensor.contents.fp32_contents.extend(case.data)
    elif case.datatype == "INT32":
        tensor.contents.int_contents.extend(case.data)
    else:
        tensor.contents.bytes_contents.extend(d.encode() for d in case.data)
    for key, value in case.parameters.items():
        param = request.parameters[key]
        if isinstance(value, str):
            param.double_param = float(value)  # what a gRPC client sends for "nan"
        elif value > 2**62:
            param.double_param = float(value)
        else:
            param.int64_param = value
    return request


def over_grpc(stub: tstub.GRPCInferenceServiceStub, case: Case) -> set[int]:
    """The HTTP statuses the answer's gRPC code stands for."""
    metadata = []
    if case.key is not None:
        metadata.append(("x-wasmgate-canary-key", case.key))
    try:
        stub.ModelInfer(grpc_request(case), metadata=metadata, timeout=30)
    except grpc.RpcError as e:
        return GRPC_STATUS[e.code().name]
    return {200}


async def over_mqtt(dev: Requester, case: Case, seen: int) -> int:
    user = []
    if case.key is not None:
        user.append(("canary-key", case.key))
    if case.pin is not None:
        user.append(("version", case.pin))
    if case.timeout_ms is not None:
        user.append(("timeout_ms", case.timeout_ms))
    topic = f"wasmgate/v1/{GW}/models/{case.model}/infer"
    correlation = b"%d" % seen  # a request's identity (the same one would be deduplicated)
    dev.request(
        topic, body(case), response_topic="conf/replies", correlation=correlation, user=user
    )
    replies = await dev.wait_for(seen + 1, timeout=30)
    return int(replies[seen].props["status"])


HOLD = Case("holds the one slot", "probe", "BYTES", [1], ["L"], 504)
OVERLOAD = Case("overload", "probe", "BYTES", [1], ["Phi"], 429)


def in_flight(daemon: Daemon) -> float:
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = "wasmgate_in_flight"
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix) and line[len(prefix)] in " {")  # fmt: skip


async def wait_in_flight(daemon: Daemon, running: int = 1) -> None:
    """Until ``running`` requests are in the service (0: the last holder's guest stopped:
    its answer may come first, when the service's timer beats the sandbox's verdict)."""
    end = time.monotonic() + 30
    while (in_flight(daemon) >= 1) != (running >= 1):
        assert time.monotonic() < end, f"never {running} in flight"
        await asyncio.sleep(0.02)


async def overloaded(
    daemon: Daemon, stub: tstub.GRPCInferenceServiceStub, dev: Requester, seen: int
) -> dict[str, set[int]]:
    """On each transport: a request that loops takes the one slot, the next is refused."""
    got: dict[str, set[int]] = {}
    holder = asyncio.create_task(asyncio.to_thread(over_http, daemon, HOLD))
    await wait_in_flight(daemon)
    got["http"] = {over_http(daemon, OVERLOAD)}
    assert await holder == HOLD.status
    await wait_in_flight(daemon, 0)
    holding = asyncio.create_task(asyncio.to_thread(over_grpc, stub, HOLD))
    await wait_in_flight(daemon)
    got["grpc"] = over_grpc(stub, OVERLOAD)
    assert HOLD.status in await holding
    await wait_in_flight(daemon, 0)
    topic = f"wasmgate/v1/{GW}/models/probe/infer"
    dev.request(topic, body(HOLD), response_topic="conf/replies", correlation=b"hold")
    await wait_in_flight(daemon)
    got["mqtt"] = {await over_mqtt(dev, OVERLOAD, seen)}  # answered before the holder
    replies = await dev.wait_for(seen + 2, timeout=30)
    assert int(replies[seen + 1].props["status"]) == HOLD.status
    return got


def expressible(case: Case, transport: str) -> bool:
    """gRPC has no per-request timeout header nor a pinned-version metadata."""
    return transport != "grpc" or (case.timeout_ms is None and case.pin is None)


async def _cloud_answer(request: web.Request) -> web.Response:
    """The cloud fallback endpoint (``cloud.protocol = "raw"``): a fixed answer."""
    await request.read()
    return web.Response(body=b"cloud")


@pytest.fixture
def cloud() -> Iterator[str]:
    app = web.Application()
    app.router.add_post("/v1/adapters/probe", _cloud_answer)
    with serving(app) as url:
        yield url


@pytest.fixture
def served(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon], cloud: str
) -> tuple[Daemon, int]:
    """The probe daemon on HTTP, MQTT and gRPC, its adapter falling back to ``cloud`` when
    it is unsure (``F``); its gRPC port."""
    port = free_port()
    # MQTT retries a busy refusal (a backlog waits at the broker): briefly here.
    mqtt = {"host": mosquitto.host, "port": mosquitto.port, "gateway_id": GW, "busy_retry_s": 0.3}
    config = {"mqtt": mqtt, "grpc": {"port": port}, "cloud": {"url": cloud, "protocol": "raw"}}
    # One request at a time, none queued, the looping guest stopped after 3 s: a request
    # that loops holds the only slot, so the next one is refused (overload).
    limits = {"max_in_flight": 1, "queue_size": 0, "deadline_ms": 3000}
    fallback = {"allowed": True, "on_adapter_request": True, "send_payload": True}
    daemon = probe_daemon(tmp_path, daemon_factory, config, limits, sections={"fallback": fallback})
    return daemon, port


def failure_lines(log: str) -> dict[str, Counter[tuple[str, str]]]:
    """The daemon's request-failure lines by transport (its ``transport=`` field): a Counter
    of (level, ``<status> <code>: <message>``); the where part differs by design (a path,
    an RPC, a topic). A deadline's message says who saw it pass first (the sandbox, or the
    service's own timer when the sandbox's verdict is late on a loaded machine), so a 504's
    message is left out."""
    found: dict[str, Counter[tuple[str, str]]] = {}
    for line in log.splitlines():
        if " wasmgate.requests: " not in line:
            continue
        level, rest = line.split(None, 2)[1:]
        said, fields = rest.split(" -> ", 1)[1].split(" transport=", 1)
        if said.startswith("504 "):
            said = said.split(":", 1)[0]
        found.setdefault(fields.split()[0], Counter())[(level, said)] += 1
    return found


def series(daemon: Daemon) -> dict[str, Counter[tuple[str, ...]]]:
    """transport -> Counter of (family, kind, name, source or error)."""
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    found: dict[str, Counter[tuple[str, ...]]] = {}
    for line in text.splitlines():
        for family in ("wasmgate_requests_total", "wasmgate_request_errors_total"):
            if not line.startswith(family + "{"):
                continue
            labels = dict(
                part.split("=", 1) for part in line[len(family) + 1 : line.index("}")].split(",")
            )
            labels = {k: v.strip('"') for k, v in labels.items()}
            last = labels.get("source") or labels.get("error") or ""
            count = float(line.rsplit(" ", 1)[1])
            key = (family, labels["kind"], labels["name"], last)
            found.setdefault(labels["transport"], Counter())[key] += int(count)
    return found


async def test_every_case_answers_and_counts_the_same_on_every_transport(
    served: tuple[Daemon, int], mosquitto: Broker
) -> None:
    daemon, grpc_port = served
    statuses: dict[str, dict[str, set[int]]] = {}
    with (
        grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
        Requester(mosquitto.port).connect("conf/replies") as dev,
    ):
        stub = tstub.GRPCInferenceServiceStub(channel)
        for i, case in enumerate(CASES):
            got = statuses[case.name] = {
                "http": {over_http(daemon, case)},
                "mqtt": {await over_mqtt(dev, case, i)},
            }
            if expressible(case, "grpc"):
                got["grpc"] = over_grpc(stub, case)
        statuses[OVERLOAD.name] = await overloaded(daemon, stub, dev, len(CASES))
    for case in [*CASES, OVERLOAD]:
        got = statuses[case.name]
        assert got["http"] == got["mqtt"] == {case.status}, (case.name, got)
        if "grpc" in got:
            assert case.status in got["grpc"], (case.name, got)
    counted = series(daemon)
    grpc_cases = [c for c in [*CASES, HOLD, OVERLOAD] if expressible(c, "grpc")]
    assert set(counted) == {"http", "grpc", "mqtt"}
    assert counted["http"] == counted["mqtt"]
    assert sum(counted["grpc"].values()) == len(grpc_cases)
    assert counted["grpc"] <= counted["http"]  # the same series, fewer cases
    cloud = [n for (_, _, name, src), n in counted["http"].items() if src == "cloud"]
    assert cloud == [1]
    log = daemon.log()
    assert "Traceback" not in log
    # Each server error is logged once per transport, in the same line; a client mistake
    # at most once a minute per transport and status (``ops/failures.py``).
    every = failure_lines(log)
    assert set(every) == {"http", "grpc", "mqtt"}, log
    lines = {t: Counter({k: n for k, n in c.items() if k[1] >= "5"}) for t, c in every.items()}
    assert lines["http"] == lines["grpc"] == lines["mqtt"], lines
    server_errors = [c for c in [*CASES, HOLD] if c.status >= 500]
    assert sum(lines["http"].values()) == len(server_errors), lines
    for counted_lines in every.values():
        client = Counter(said[:3] for (_, said), n in counted_lines.items() if said < "5"
                         for _ in range(n))  # fmt: skip
        assert all(n == 1 for n in client.values()), counted_lines
    assert ("WARNING", "500 inference_failed: probe: adapter error: probe failed") in lines["http"]


async def test_unknown_model_and_version_texts_are_tritons_on_every_transport(
    served: tuple[Daemon, int], mosquitto: Broker
) -> None:
    """Triton's clients match on the start of the message: the one data plane gives every
    transport the same text (the detail in parentheses included)."""
    daemon, grpc_port = served
    cases = [
        (Case("unknown", "nope", "FP32", [1, 4], X, 404),
         "Request for unknown model: 'nope' is not found ("),
        (Case("unknown version", "double", "FP32", [1, 4], X, 404, pin="7"),
         "Request for unknown model: 'double' version 7 is not found ("),
    ]  # fmt: skip
    with Requester(mosquitto.port).connect("conf/replies") as dev:
        for i, (case, start) in enumerate(cases):
            url = f"{daemon.url}/v2/models/{case.model}/infer"
            headers = {"X-Wasmgate-Version": case.pin} if case.pin else {}
            req = urllib.request.Request(url, data=body(case), headers=headers, method="POST")
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=30)
            http_text = json.loads(err.value.read())["error"]
            await over_mqtt(dev, case, i)
            mqtt_text = json.loads(dev.snapshot()[i].payload)["error"]
            assert http_text.startswith(start), http_text
            assert mqtt_text == http_text
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = tstub.GRPCInferenceServiceStub(channel)
        request = grpc_request(cases[0][0])
        with pytest.raises(grpc.RpcError) as failed:
            stub.ModelInfer(request, timeout=30)
        assert failed.value.details().startswith(cases[0][1])
        request.model_name, request.model_version = "double", "7"
        with pytest.raises(grpc.RpcError) as failed:
            stub.ModelInfer(request, timeout=30)
        assert failed.value.details().startswith(cases[1][1])

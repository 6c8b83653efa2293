"""CloudFallback against a second aiohttp server on loopback playing the cloud."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from aiohttp import web

from tests.fixtures.net import free_port
from tests.fixtures.waits import ManualClock
from wasmgate.runtime.cloud.breaker import BreakerState, CircuitBreaker
from wasmgate.runtime.cloud.client import CloudFallback
from wasmgate.runtime.cloud.v2wire import decode_v2_response, encode_v2_request
from wasmgate.runtime.errors import CloudUnavailable
from wasmgate.runtime.ops.config import CloudSettings
from wasmgate.runtime.protocol import codec as v2
from wasmgate.typed import convert

TOKEN = "s3cret"


@dataclass
class Cloud:
    """The fake cloud's behaviour, switchable mid-test."""

    mode: str = "healthy"  # healthy | slow | error | flapping
    hits: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    seen: list[dict[str, object]] = field(default_factory=list)
    url: str = ""


def _v2_answer(name: str, inputs: dict[str, v2.Array], req: v2.InferRequest) -> v2.Encoded:
    if name == "affine":
        return v2.encode_response(name, "7", {"y": inputs["x"] * 2 + 1}, req)
    payload = inputs["payload"].ravel()[0]
    reason = req.parameters.get("fallback_reason", "")
    answer = np.empty(1, dtype=np.object_)
    answer[:] = [payload.upper() + b"|" + str(reason).encode()]
    return v2.encode_response(name, "7", {"answer": answer}, req)


async def _gate(cloud: Cloud, request: web.Request) -> None:
    cloud.hits += 1
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        raise web.HTTPUnauthorized(text="bad token")
    if cloud.mode == "slow":
        await asyncio.sleep(1.0)
    failing = cloud.mode == "error" or (cloud.mode == "flapping" and cloud.hits % 2 == 1)
    if failing:
        raise web.HTTPInternalServerError(text="model server crashed: CUDA OOM")


def cloud_app(cloud: Cloud) -> web.Application:
    async def infer(request: web.Request) -> web.Response:
        cloud.in_flight += 1
        cloud.max_in_flight = max(cloud.max_in_flight, cloud.in_flight)
        try:
            await _gate(cloud, request)
            length = request.headers.get("Inference-Header-Content-Length")
            req = v2.parse_request(await request.read(), int(length) if length else None)
            cloud.seen.append({"params": dict(req.parameters), "in": dict(req.input_parameters)})
            enc = _v2_answer(request.match_info["name"], req.inputs, req)
        finally:
            cloud.in_flight -= 1
        headers = {"Content-Type": enc.content_type}
        if enc.header_length is not None:
            headers["Inference-Header-Content-Length"] = str(enc.header_length)
        return web.Response(body=enc.body, headers=headers)

    async def raw(request: web.Request) -> web.Response:
        await _gate(cloud, request)
        reason = request.headers.get("X-Wasmgate-Fallback-Reason", "")
        body = (await request.read()).upper() + b"|" + reason.encode()
        return web.Response(body=body, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_post("/v2/models/{name}/infer", infer)
    app.router.add_post("/v1/adapters/{name}", raw)
    return app


@pytest.fixture
async def cloud() -> AsyncIterator[Cloud]:
    state = Cloud()
    runner = web.AppRunner(cloud_app(state))
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    state.url = f"http://127.0.0.1:{port}/"
    try:
        yield state
    finally:
        await runner.cleanup()


def settings(url: str, **over: object) -> CloudSettings:
    base: dict[str, object] = {
        "url": url,
        "token": TOKEN,
        "timeout_s": 0.3,
        "breaker_failures": 3,
        "breaker_reset_s": 0.3,
    }
    base.update(over)
    return convert(base, CloudSettings, strict=False)


async def test_adapter_v2_binary_payload_round_trip(cloud: Cloud) -> None:
    async with CloudFallback(settings(cloud.url)) as fb:
        answer = await fb.infer_adapter("digits", b"ab\x00\xffc", "image/x-raw", "low confidence")
    assert answer == b"AB\x00\xffC|low confidence"
    assert cloud.seen == [
        {
            "params": {"fallback_reason": "low confidence"},
            "in": {"payload": {"binary_data_size": 9, "content_type": "image/x-raw"}},
        }
    ]
    assert fb.state["breaker"]["state"] == "closed"


async def test_adapter_raw_protocol(cloud: Cloud) -> None:
    async with CloudFallback(settings(cloud.url, protocol="raw")) as fb:
        assert await fb.infer_adapter("digits", b"xy", "text/plain", "busy") == b"XY|busy"


async def test_model_inference_json_tensors(cloud: Cloud) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    async with CloudFallback(settings(cloud.url)) as fb:
        out = await fb.infer_model("affine", {"x": x}, None)
        picked = await fb.infer_model("affine", {"x": x}, ["y"])
    np.testing.assert_array_equal(out["y"], x * 2 + 1)
    assert out["y"].dtype == np.float32
    np.testing.assert_array_equal(picked["y"], x * 2 + 1)


async def test_wrong_token_is_a_clear_error_not_a_breaker_failure(cloud: Cloud) -> None:
    async with CloudFallback(settings(cloud.url, token="wrong", breaker_failures=1)) as fb:
        with pytest.raises(CloudUnavailable, match=r"HTTP 401 .*bad token"):
            await fb.infer_adapter("a", b"p", None, "error")
        assert fb.breaker.snapshot().state is BreakerState.CLOSED


async def test_slow_cloud_times_out(cloud: Cloud) -> None:
    cloud.mode = "slow"
    async with CloudFallback(settings(cloud.url)) as fb:
        with pytest.raises(CloudUnavailable, match=r"no answer within 0.3s"):
            await fb.infer_adapter("a", b"p", None, "deadline")
        assert fb.state["failures"] == 1


async def test_down_cloud_refused_then_breaker_opens() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with CloudFallback(settings(url)) as fb:
        for _ in range(3):
            with pytest.raises(CloudUnavailable, match=r"cannot connect: .*[Rr]efused"):
                await fb.infer_adapter("a", b"p", None, "error")
        assert fb.breaker.snapshot().state is BreakerState.OPEN
        with pytest.raises(CloudUnavailable, match=r"circuit breaker open .*refused.*next probe"):
            await fb.infer_adapter("a", b"p", None, "error")
        assert fb.state["breaker"]["rejected"] == 1
        assert fb.state["requests"] == 3


async def test_http_500_names_status_and_body(cloud: Cloud) -> None:
    cloud.mode = "error"
    async with CloudFallback(settings(cloud.url)) as fb:
        with pytest.raises(CloudUnavailable, match=r"HTTP 500 .*CUDA OOM"):
            await fb.infer_model("affine", {"x": np.zeros((1, 4), np.float32)}, None)


async def test_flapping_cloud_breaker_cycle(cloud: Cloud) -> None:
    cloud.mode = "error"
    clock = ManualClock()
    # reset_s and the steps are binary fractions: the clock's sums are exact
    over = {"breaker_failures": 2, "breaker_reset_s": 0.5}
    async with CloudFallback(settings(cloud.url, **over), clock=clock) as fb:
        for _ in range(2):
            with pytest.raises(CloudUnavailable, match="HTTP 500"):
                await fb.infer_adapter("a", b"p", None, "error")
        assert fb.breaker.snapshot().state is BreakerState.OPEN
        with pytest.raises(CloudUnavailable, match="circuit breaker open"):
            await fb.infer_adapter("a", b"p", None, "error")
        assert cloud.hits == 2  # refused without touching the cloud
        clock.advance(0.25)
        assert fb.breaker.snapshot().state is BreakerState.OPEN
        clock.advance(0.25)
        assert fb.breaker.snapshot().state is BreakerState.HALF_OPEN
        with pytest.raises(CloudUnavailable, match="HTTP 500"):  # the probe fails
            await fb.infer_adapter("a", b"p", None, "error")
        assert fb.breaker.snapshot().state is BreakerState.OPEN
        cloud.mode = "flapping"  # hit 4: even -> succeeds
        with pytest.raises(CloudUnavailable, match="circuit breaker open"):  # opened again
            await fb.infer_adapter("a", b"p", None, "r")
        clock.advance(0.5)
        assert await fb.infer_adapter("a", b"ok", None, "r") == b"OK|r"
        assert fb.breaker.snapshot().state is BreakerState.CLOSED
        with pytest.raises(CloudUnavailable, match="HTTP 500"):  # hit 5 fails, still closed
            await fb.infer_adapter("a", b"p", None, "error")
        assert fb.breaker.snapshot().state is BreakerState.CLOSED
        assert fb.state["breaker"]["opens"] == 2


async def test_max_concurrent_requests(cloud: Cloud) -> None:
    cloud.mode = "healthy"
    async with CloudFallback(settings(cloud.url, max_concurrent=2, timeout_s=5)) as fb:
        answers = await asyncio.gather(
            *(fb.infer_adapter("a", f"p{i}".encode(), None, "busy") for i in range(8))
        )
    assert sorted(answers) == sorted(f"P{i}|busy".encode() for i in range(8))
    assert cloud.max_in_flight <= 2


def test_breaker_failure_rate_and_half_open_probe_limit() -> None:
    now = [0.0]
    br = CircuitBreaker(
        failures=100, reset_s=10, window=4, failure_rate=0.5, probes=1, clock=lambda: now[0]
    )
    seen: list[BreakerState] = []
    br.on_change.append(seen.append)
    for ok in (True, False, True):
        br.success() if ok else br.failure()
    assert br.snapshot().state is BreakerState.CLOSED  # window not full yet
    br.failure()  # 2 of 4 failed
    assert br.snapshot().state is BreakerState.OPEN
    assert not br.allow()
    now[0] = 10.0
    assert br.current() is BreakerState.HALF_OPEN  # what a call would meet ...
    assert seen == [BreakerState.OPEN]  # ... read without entering it (metrics scrape)
    assert br.allow()  # the one probe
    assert not br.allow()  # a second caller waits for the probe
    br.release()  # probe cancelled: slot free again
    assert br.allow()
    br.success()
    assert br.snapshot().state is BreakerState.CLOSED
    assert br.snapshot().rejected == 2
    assert seen == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


def test_v2_codec_round_trip_with_bytes_and_floats() -> None:
    names = np.empty(2, dtype=np.object_)
    names[:] = [b"\x00\x01", b"zz"]
    body, length = encode_v2_request(
        {"n": names, "f": np.ones((1, 2), np.float32)}, outputs=["o"], parameters={"k": 1}
    )
    assert length is not None
    doc = json.loads(body[:length])
    assert doc["outputs"] == [{"name": "o", "parameters": {}}]
    assert doc["parameters"] == {"k": 1}
    req = v2.parse_request(body, length)
    assert list(req.inputs["n"]) == [b"\x00\x01", b"zz"]
    enc = v2.encode_response("m", "1", dict(req.inputs), req)
    back = decode_v2_response(enc.body, enc.header_length)
    np.testing.assert_array_equal(back["f"], np.ones((1, 2), np.float32))

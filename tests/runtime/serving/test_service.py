"""InferenceService with real signed bundles, real wasm guests and real ONNX Runtime."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.fixtures.waits import until_async
from tests.runtime.bundlekit import BundleKit, slow_model
from tests.runtime.stack import Stack, open_stack
from wasmgate.runtime.errors import (
    BadRequest,
    BundleRejected,
    Busy,
    DeadlineExceeded,
    FallbackFailed,
    InferenceFailed,
    NotFound,
    NotReady,
    PayloadTooLarge,
)
from wasmgate.runtime.ops.config import LimitSettings
from wasmgate.runtime.served.api import AdapterRequest, ModelRequest, ServiceAPI

SLOW = {"limits": {"deadline_ms": 20_000}}


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


def req(payload: bytes, **kw: Any) -> AdapterRequest:
    return AdapterRequest("probe", payload, **kw)


async def test_adapter_runs_with_model_and_reports_timings(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 3),)) as st:
        service: ServiceAPI = st.service
        answer = await service.run_adapter(req(b"M"))
        assert answer.body == b"v3:2,4,6,8"
        assert (answer.source, answer.version) == ("local", 3)
        assert {"queue", "sandbox", "inference"} <= set(answer.timings)
        assert answer.timings["inference"] > 0
        echoed = await service.run_adapter(req(b"V-hello"))
        assert echoed.body == b"v3:-hello"
        assert echoed.events == [b"ev"]
        assert service.ready


async def test_guest_outcomes_map_to_errors(tmp_path: Path, kit: BundleKit) -> None:
    bundle = kit.build("probe", 1, sections={"limits": {"deadline_ms": 300}})
    async with open_stack(tmp_path, kit, start=(bundle,)) as st:
        with pytest.raises(BadRequest, match="bad probe input"):
            await st.service.run_adapter(req(b"B"))
        with pytest.raises(InferenceFailed, match="probe failed"):
            await st.service.run_adapter(req(b"E"))
        with pytest.raises(InferenceFailed, match="unreachable"):
            await st.service.run_adapter(req(b"T"))
        with pytest.raises(DeadlineExceeded):
            await st.service.run_adapter(req(b"L"))
        with pytest.raises(NotFound, match=r"^Request for unknown model: 'nope' is not found"):
            await st.service.run_adapter(AdapterRequest("nope", b"M"))
        # a failed request leaves nothing behind: the next one is served normally
        assert (await st.service.run_adapter(req(b"M"))).body == b"v1:2,4,6,8"
        text = st.metrics.exposition()[0].decode()
        assert 'cause="unreachable"' in text


async def test_request_deadline_shorter_than_manifest(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1, sections=SLOW),)) as st:
        with pytest.raises(DeadlineExceeded):
            await st.service.run_adapter(req(b"L", deadline=time.monotonic() + 0.2))
        with pytest.raises(DeadlineExceeded):
            await st.service.run_adapter(req(b"M", deadline=time.monotonic() - 1))


async def test_busy_beyond_in_flight_and_queue(tmp_path: Path, kit: BundleKit) -> None:
    limits = {"limits": {"deadline_ms": 20_000, "max_in_flight": 1, "queue_size": 1}}
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1, sections=limits),)) as st:
        slow = asyncio.create_task(st.service.run_adapter(req(b"W300")))
        await _until_running(st, "probe")
        queued = asyncio.create_task(st.service.run_adapter(req(b"P")))
        await until_async(lambda: _gauge(st, QUEUED) >= 1, "the second request queued")
        with pytest.raises(Busy, match="busy"):
            await st.service.run_adapter(req(b"P"))
        assert (await slow).body == b"v1:300"
        answer = await queued
        assert answer.body == b"v1:"
        assert answer.timings["queue"] > 0.05


async def test_daemon_limits_cap_the_manifest(tmp_path: Path, kit: BundleKit) -> None:
    lim = LimitSettings(max_in_flight=1, queue_size=0)
    bundle = kit.build("probe", 1, sections={"limits": {"deadline_ms": 20_000, "max_in_flight": 8}})
    async with open_stack(tmp_path, kit, limits=lim, start=(bundle,)) as st:
        slow = asyncio.create_task(st.service.run_adapter(req(b"W200")))
        await _until_running(st, "probe")
        with pytest.raises(Busy):
            await st.service.run_adapter(req(b"P"))
        await slow


async def test_deadline_while_queued(tmp_path: Path, kit: BundleKit) -> None:
    limits = {"limits": {"deadline_ms": 20_000, "max_in_flight": 1, "queue_size": 4}}
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1, sections=limits),)) as st:
        # W2000 spins well past the queued request's deadline even on a fast machine
        slow = asyncio.create_task(st.service.run_adapter(req(b"W2000")))
        await _until_running(st, "probe")
        with pytest.raises(DeadlineExceeded, match="queued"):
            await st.service.run_adapter(req(b"P", deadline=time.monotonic() + 0.1))
        await slow


async def test_payload_limit(tmp_path: Path, kit: BundleKit) -> None:
    bundle = kit.build("probe", 1, sections={"limits": {"max_input_bytes": 16}})
    async with open_stack(tmp_path, kit, start=(bundle,)) as st:
        with pytest.raises(PayloadTooLarge, match=r"limits\.max_input_bytes \(16\)"):
            await st.service.run_adapter(req(b"P" + b"x" * 16))
        assert (await st.service.run_adapter(req(b"P" + b"x" * 15))).version == 1


async def test_direct_model_inference_batched(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 2),)) as st:
        xs = [np.full((1, 4), i, np.float32) for i in range(20)]
        answers = await asyncio.gather(
            *(st.service.infer_model(ModelRequest("double", {"x": x})) for x in xs)
        )
        for x, answer in zip(xs, answers, strict=True):
            np.testing.assert_array_equal(answer.outputs["y"], 2 * x)
            assert (answer.source, answer.version) == ("local", 2)
        info = st.service.model_info("double")
        assert info.max_batch_size == 8
        assert info.details["provider"] == "CPUExecutionProvider"


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ({"z": np.ones((1, 4), np.float32)}, None, "has no input 'z'"),
        ({}, None, "needs input 'x'"),
        ({"x": np.ones((1, 5), np.float32)}, None, "shape"),
        ({"x": np.ones((1, 4), np.float32)}, ["nope"], "has no output 'nope'"),
    ],
)
async def test_model_bad_requests(
    tmp_path: Path,
    kit: BundleKit,
    inputs: dict[str, npt.NDArray[Any]],
    outputs: list[str] | None,
    message: str,
) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        with pytest.raises(BadRequest, match=message):
            await st.service.infer_model(ModelRequest("double", inputs, outputs))


async def test_metadata(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 4),)) as st:
        infos = {i.name: i for i in st.service.list_models()}
        adapter, model = infos["probe"], infos["double"]
        assert adapter.kind == "adapter"
        assert [(t.name, t.datatype) for t in adapter.inputs] == [("payload", "BYTES")]
        assert [(t.name, t.datatype) for t in adapter.outputs] == [("answer", "BYTES")]
        assert (model.kind, model.version, model.bundle) == ("model", 4, "probe")
        assert model.inputs[0].shape == (-1, 4)
        assert st.service.adapter_names() == ["probe"]
        assert st.service.model_info("double", "4").version == 4
        with pytest.raises(NotFound, match=r"^Request for unknown model: 'double' version 3 "):
            st.service.model_info("double", "3")
        with pytest.raises(NotFound):
            st.service.model_info("missing")


async def test_draining_refuses_new_requests(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1, sections=SLOW),)) as st:
        slow = asyncio.create_task(st.service.run_adapter(req(b"W200")))
        async with asyncio.timeout(30):  # inside the service (a fixed sleep lost under load)
            while st.service.in_flight() == 0:
                await asyncio.sleep(0.005)
        st.service.start_draining()
        assert not st.service.ready
        with pytest.raises(NotReady):
            await st.service.run_adapter(req(b"P"))
        assert not await st.service.drained(0.01)
        assert (await slow).body == b"v1:200"  # admitted work finishes
        assert await st.service.drained(1)


class Cloud:
    """A stand-in for `CloudFallback` (the cloud client is not under test here)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, bytes, str]] = []

    async def infer_adapter(
        self, adapter: str, payload: bytes, content_type: str | None, reason: str
    ) -> bytes:
        self.calls.append((adapter, payload, reason))
        if self.fail:
            raise ConnectionError("cloud unreachable")
        return b"cloud:" + payload

    async def infer_model(
        self,
        model: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        outputs: Sequence[str] | None,
    ) -> Mapping[str, npt.NDArray[Any]]:
        if self.fail:
            raise ConnectionError("cloud unreachable")
        return {"y": np.zeros((1, 4), np.float32)}


FALLBACK = {
    "fallback": {
        "allowed": True,
        "on_error": True,
        "on_adapter_request": True,
        "send_payload": True,
    }
}


async def test_fallback_on_error_and_on_request(tmp_path: Path, kit: BundleKit) -> None:
    cloud = Cloud()
    bundle = kit.build("probe", 1, sections=FALLBACK)
    async with open_stack(tmp_path, kit, cloud=cloud, start=(bundle,)) as st:
        answer = await st.service.run_adapter(req(b"E"))
        assert (answer.body, answer.source) == (b"cloud:E", "cloud")
        assert "probe failed" in (answer.fallback_reason or "")
        assert "fallback" in answer.timings
        asked = await st.service.run_adapter(req(b"F"))
        assert (asked.source, asked.fallback_reason) == ("cloud", "low confidence")
        with pytest.raises(BadRequest):  # the client's fault never goes to the cloud
            await st.service.run_adapter(req(b"B"))
        assert len(cloud.calls) == 2
        text = st.metrics.exposition()[0].decode()
        assert 'reason="adapter_request"' in text
        assert 'outcome="ok"' in text


async def test_fallback_failure_names_both_causes(tmp_path: Path, kit: BundleKit) -> None:
    bundle = kit.build("probe", 1, sections=FALLBACK)
    async with open_stack(tmp_path, kit, cloud=Cloud(fail=True), start=(bundle,)) as st:
        with pytest.raises(FallbackFailed, match=r"local: .*probe failed.*cloud: cloud unreach"):
            await st.service.run_adapter(req(b"E"))
        weak = await st.service.run_adapter(req(b"F"))  # the local answer stands
        assert (weak.body, weak.source) == (b"v1:local", "local")


async def test_a_cloud_that_stays_away_is_logged_once_not_per_request(
    tmp_path: Path, kit: BundleKit, caplog: pytest.LogCaptureFixture
) -> None:
    # The soak's cloud outage wrote ~1,600 identical warnings a minute (one per request).
    bundle = kit.build("probe", 1, sections=FALLBACK)
    async with open_stack(tmp_path, kit, cloud=Cloud(fail=True), start=(bundle,)) as st:
        with caplog.at_level(logging.WARNING, logger="wasmgate.fallback"):
            for _ in range(50):
                weak = await st.service.run_adapter(req(b"F"))
                assert weak.source == "local"
    failed = [r for r in caplog.records if "cloud fallback failed" in r.getMessage()]
    assert len(failed) == 1
    assert "cloud unreachable" in failed[0].__dict__["e"]


async def test_no_fallback_unless_the_manifest_allows(tmp_path: Path, kit: BundleKit) -> None:
    cloud = Cloud()
    not_allowed = {"fallback": {**FALLBACK["fallback"], "allowed": False}}
    async with open_stack(
        tmp_path, kit, cloud=cloud, start=(kit.build("probe", 1, sections=not_allowed),)
    ) as st:
        with pytest.raises(InferenceFailed):
            await st.service.run_adapter(req(b"E"))
        assert (await st.service.run_adapter(req(b"F"))).source == "local"
    assert cloud.calls == []


async def test_missing_model_goes_to_the_cloud_when_allowed(tmp_path: Path, kit: BundleKit) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not an onnx model")
    policy = {"fallback": {**FALLBACK["fallback"], "on_missing_model": True}}
    cloud = Cloud()
    bundle = kit.build("probe", 1, model_file=broken, sections=policy)
    async with open_stack(tmp_path, kit, cloud=cloud, start=(bundle,)) as st:
        assert not st.service.model_info("double").ready
        assert st.service.model_info("probe").ready  # the cloud answers for it
        answer = await st.service.run_adapter(req(b"M"))
        assert (answer.body, answer.source) == (b"cloud:M", "cloud")
        assert "not loaded on this device" in (answer.fallback_reason or "")
        direct = await st.service.infer_model(
            ModelRequest("double", {"x": np.ones((1, 4), np.float32)})
        )
        assert direct.source == "cloud"


async def test_missing_model_refuses_the_bundle_otherwise(tmp_path: Path, kit: BundleKit) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not an onnx model")
    async with open_stack(tmp_path, kit) as st:
        with pytest.raises(BundleRejected, match="model 'double'"):
            await st.install(kit.build("probe", 1, model_file=broken))
        assert st.service.list_models() == []


async def test_model_only_bundle(tmp_path: Path, kit: BundleKit) -> None:
    bundle = kit.build("maths", 1, adapter=False, model_name="twice")
    async with open_stack(tmp_path, kit, start=(bundle,)) as st:
        assert st.service.adapter_names() == []
        assert [(i.name, i.kind) for i in st.service.list_models()] == [("twice", "model")]
        answer = await st.service.infer_model(
            ModelRequest("twice", {"x": np.arange(8, dtype=np.float32).reshape(2, 4)})
        )
        np.testing.assert_array_equal(answer.outputs["y"][1], [8, 10, 12, 14])


def _slow_bundle(kit: BundleKit, iterations: int, batch: int = 1) -> Path:
    model = kit.root / f"slow-{iterations}.onnx"
    model.write_bytes(slow_model(iterations))
    one_at_a_time = {"limits": {"deadline_ms": 120_000, "max_in_flight": 1, "queue_size": 0}}
    return kit.build(
        "slow",
        1,
        adapter=False,
        model_name="slow",
        model_file=model,
        batching={"max_batch_size": batch, "max_queue_delay_us": 0},
        sections=one_at_a_time,
    )


def _gauge(st: Stack, series: str) -> float:
    for line in st.metrics.exposition()[0].decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


QUEUED = 'wasmgate_queue_depth{name="probe"}'


async def _until_running(st: Stack, name: str) -> None:
    """Until ``name`` holds an admission slot (its run started), instead of a guessed sleep."""
    await until_async(
        lambda: _gauge(st, f'wasmgate_in_flight{{name="{name}"}}') >= 1, f"{name} running"
    )


async def _until_free(st: Stack, name: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while _gauge(st, f'wasmgate_in_flight{{name="{name}"}}') > 0:
        assert time.monotonic() < end, f"{name}: admission slot still taken after {seconds}s"
        await asyncio.sleep(0.05)


async def test_a_stopped_run_frees_its_slot(tmp_path: Path, kit: BundleKit) -> None:
    x = {"x": np.ones((1, 4), np.float32)}
    # A million iterations would take an hour: only the watchdog ends the run this soon.
    async with open_stack(tmp_path, kit, start=(_slow_bundle(kit, 1_000_000),)) as st:
        with pytest.raises(DeadlineExceeded):
            await st.service.infer_model(ModelRequest("slow", x, deadline=time.monotonic() + 0.3))
        await _until_free(st, "slow", 60)
        assert _gauge(st, 'wasmgate_runs_cancelled_total{model="slow"}') == 1
        with pytest.raises(DeadlineExceeded):  # admitted (not Busy): the slot is free again
            await st.service.infer_model(ModelRequest("slow", x, deadline=time.monotonic() + 0.3))


@pytest.mark.parametrize("batch", [1, 2], ids=["pool", "batcher"])
async def test_an_unstoppable_run_keeps_its_slot_until_it_ends(
    tmp_path: Path, kit: BundleKit, batch: int
) -> None:
    x = {"x": np.ones((1, 4), np.float32)}
    # No watchdog: like a LiteRT invoke, the run goes on after the client's 504, and its
    # tenant (this model) pays for it: its one slot stays taken until the run ends, on the
    # worker pool and in a running batch alike.
    bundle = _slow_bundle(kit, 2_000, batch)
    async with open_stack(tmp_path, kit, start=(bundle,), watchdog=False) as st:
        with pytest.raises(DeadlineExceeded):
            await st.service.infer_model(ModelRequest("slow", x, deadline=time.monotonic() + 0.1))
        assert _gauge(st, 'wasmgate_in_flight{name="slow"}') == 1
        with pytest.raises(Busy):
            await st.service.infer_model(ModelRequest("slow", x, deadline=time.monotonic() + 60))
        await _until_free(st, "slow", 300)
        answer = await st.service.infer_model(ModelRequest("slow", x))
        np.testing.assert_array_equal(answer.outputs["y"], x["x"])


async def test_a_guest_waiting_on_a_batched_slow_model_is_stopped_at_its_deadline(
    tmp_path: Path, kit: BundleKit
) -> None:
    # The probe guest's "M" computes model "double" through wasi-nn; here "double" is the
    # hour-long model behind a Batcher. The guest's deadline reaches the batch's ORT run.
    slow = kit.root / "slow-guest.onnx"
    slow.write_bytes(slow_model(1_000_000))
    bundle = kit.build("probe", 1, model_file=slow, sections=SLOW)
    async with open_stack(tmp_path, kit, start=(bundle,)) as st:
        with pytest.raises(DeadlineExceeded):
            await st.service.run_adapter(req(b"M", deadline=time.monotonic() + 0.3))
        await _until_free(st, "probe", 60)
        # The guest's slot is freed when it is stopped; the batch's run is cancelled (and
        # counted) by the watchdog just after: late on a loaded machine, so wait for it.
        cancelled = 'wasmgate_runs_cancelled_total{model="double"}'
        end = time.monotonic() + 60
        while _gauge(st, cancelled) < 1 and time.monotonic() < end:
            await asyncio.sleep(0.05)
        assert _gauge(st, cancelled) == 1
        assert (await st.service.run_adapter(req(b"P"))).body == b"v1:"  # still serving

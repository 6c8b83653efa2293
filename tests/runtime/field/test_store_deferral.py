"""Deferred cloud fallbacks against real daemons: the edge's local adapter always fails
(bundle param ``broken``), its cloud (a second wasmgate, serving ``probe`` tagged ``cloud``)
is down at first; requests allowed to wait are kept, survive a SIGKILL of the edge and are
answered on MQTT ``deferred/probe`` once the cloud is up."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.runtime.bundlekit import BundleKit
from tests.runtime.edges.test_mqtt_edges import GW, mqtt_config, wait_online
from tests.runtime.field.test_store_daemon import stream_status, until
from tests.runtime.mqtt.requester import Requester
from tests.runtime.stack import host_profile_name

ROOT = f"wasmgate/v1/{GW}"
DEFERRED = f"{ROOT}/deferred/probe"
FALLBACK = {"allowed": True, "on_error": True, "send_payload": True, "defer": True}


def _all_acked(daemon: Daemon) -> bool:
    streams = daemon.get_json("/v1/status")["components"]["store"]["streams"]
    return all(s["depth"] == 0 for s in streams.values())


def _post(daemon: Daemon, payload: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{daemon.url}/v1/adapters/probe", data=payload, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _daemon(tmp: Path, kit: BundleKit, name: str, bundle: Path, **cfg: Any) -> Daemon:
    """A daemon serving ``bundle``, not started (its port is known before it listens)."""
    bundles = tmp / name / "data" / "bundles"
    bundles.mkdir(parents=True)
    bundle.rename(bundles / bundle.name)
    config = {
        "paths": {"data_dir": tmp / name / "data", "trust_file": kit.save_trust(tmp / "t.json")},
        "profile": host_profile_name(),
        **cfg,
    }
    return Daemon(tmp / name, config)


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


@pytest.fixture
def cloud(tmp_path: Path, kit: BundleKit) -> Iterator[Daemon]:
    daemon = _daemon(tmp_path, kit, "cloud", kit.build("probe", 1, tag="cloud", out_dir=tmp_path))
    try:
        yield daemon
    finally:
        daemon.stop()


def _edge(
    tmp: Path,
    kit: BundleKit,
    broker: Broker,
    cloud: Daemon,
    fallback: dict[str, bool],
    **cloud_cfg: Any,
) -> Daemon:
    sections = {"params": {"broken": True}, "fallback": fallback}
    bundle = kit.build("probe", 2, sections=sections, out_dir=tmp)
    cfg = {"url": cloud.url, "breaker_reset_s": 0.5, "timeout_s": 2, **cloud_cfg}
    return _daemon(
        tmp,
        kit,
        "edge",
        bundle,
        cloud=cfg,
        **mqtt_config(broker, reconnect_max_s=0.5, reconnect_spread_s=0),
    )


async def test_deferred_requests_are_answered_when_the_cloud_returns(
    tmp_path: Path, kit: BundleKit, mosquitto: Broker, cloud: Daemon
) -> None:
    edge = _edge(tmp_path, kit, mosquitto, cloud, FALLBACK)
    edge.start()
    try:
        await wait_online(mosquitto)
        with Requester(mosquitto.port).connect(DEFERRED, "replies/#") as dev:
            ids = []
            for word in ("one", "two", "three"):
                status, body = _post(edge, b"P" + word.encode())
                assert status == 202, body
                answer = json.loads(body)
                assert answer["topic"] == DEFERRED
                ids.append(answer["deferred"])
            dev.request(f"{ROOT}/adapters/probe/req", b"Pfour", response_topic="replies/4",
                        correlation=b"4")  # fmt: skip
            (reply,) = await dev.wait_for(1, timeout=30)
            assert reply.props["status"] == "202"
            ids.append(json.loads(reply.payload)["deferred"])
            assert ids == sorted(ids)
            assert stream_status(edge, "cloud")["depth"] == 4
            edge.kill()  # SIGKILL: the kept requests are on disk
            edge.start()
            assert stream_status(edge, "cloud")["depth"] == 4
            await asyncio.to_thread(cloud.start)
            await until(lambda: len(dev.snapshot()) >= 5, "the four deferred answers")
            # A fence, not a quiet window: with every stream acked the edge has nothing left
            # to resend, and its answer to a request sent now follows anything it published.
            await until(lambda: _all_acked(edge), "every stream acked")
            dev.request(f"{ROOT}/adapters/probe/req", b"Pfence", response_topic="replies/f",
                        correlation=b"f")  # fmt: skip
            await until(lambda: any(r.correlation == b"f" for r in dev.snapshot()), "the fence")
            got = [r for r in dev.snapshot() if r.topic == DEFERRED and r.payload != b"cloud:fence"]
    finally:
        edge.stop()
    assert [r.payload for r in got] == [b"cloud:one", b"cloud:two", b"cloud:three", b"cloud:four"]
    assert [int(r.props["deferred-id"]) for r in got] == ids
    assert {(r.props["status"], r.props["source"]) for r in got} == {("200", "cloud")}


@pytest.mark.parametrize(
    ("fallback", "cloud_cfg"),
    [
        ({**FALLBACK, "defer": False}, {}),  # the bundle does not ask for it
        (FALLBACK, {"defer": False}),  # the operator turned it off
    ],
)
async def test_without_deferral_a_cloud_outage_fails_as_before(
    tmp_path: Path, kit: BundleKit, mosquitto: Broker, cloud: Daemon,
    *, fallback: dict[str, bool], cloud_cfg: dict[str, Any],
) -> None:  # fmt: skip
    edge = _edge(tmp_path, kit, mosquitto, cloud, fallback, **cloud_cfg)
    edge.start()
    try:
        status, body = _post(edge, b"Pone")
        assert status == 500
        assert b"broken release" in body
        assert b"cloud:" in body
        assert stream_status(edge, "cloud")["depth"] == 0
    finally:
        edge.stop()

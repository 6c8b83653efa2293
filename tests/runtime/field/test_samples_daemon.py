"""Hard examples through real daemons: the probe guest's ``F`` asks for fallback (low
confidence, local answer ``<tag>:local``); a loopback cloud (``cloud.protocol = "raw"``)
answers what the test sets. Samples are read back with ``wasmgate samples list|export``
while the daemon runs; a forbidden payload is checked against the store file's bytes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import serving
from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from tests.runtime.edges.probe import request
from tests.runtime.edges.test_mqtt_edges import GW, mqtt_config, wait_online
from tests.runtime.field.ocisamples import pulled
from tests.runtime.field.test_store_daemon import stream_status, until
from tests.runtime.mqtt.requester import Requester
from tests.runtime.stack import host_profile_name

FALLBACK = {"allowed": True, "on_adapter_request": True, "send_payload": True}
KEEP = {"keep_payload": True, "rate": 1.0, "max_per_hour": 2}


class AnsweringCloud:
    """A raw-protocol cloud answering ``answer``; records each payload it was sent."""

    def __init__(self) -> None:
        self.answer = b"none:local"
        self.payloads: list[bytes] = []
        self.samples: list[bytes] = []
        self.sample_failures = 0
        """The next POSTs of samples answered 503 (then they are taken)."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/adapters/{name}", self._handle)
        app.router.add_post("/ingest/samples", self._sample)
        return app

    async def _sample(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.sample_failures > 0:
            self.sample_failures -= 1
            return web.Response(status=503)
        self.samples.append(body)
        return web.Response(status=204)

    async def _handle(self, request: web.Request) -> web.Response:
        self.payloads.append(await request.read())
        return web.Response(body=self.answer, content_type="application/octet-stream")


@pytest.fixture
def cloud() -> Iterator[tuple[AnsweringCloud, str]]:
    fake = AnsweringCloud()
    with serving(fake.app()) as url:
        yield fake, url


def _daemon(
    tmp: Path,
    factory: Callable[..., Daemon],
    bundles: dict[str, dict[str, Any]],
    **config: Any,
) -> Daemon:
    """A daemon serving one probe bundle per name (``sections`` each) and its store path."""
    kit = BundleKit(tmp / "kit")
    out = tmp / "d" / "data" / "bundles"
    out.mkdir(parents=True)
    for name, sections in bundles.items():
        kit.build(name, 1, tag="none", model=False, out_dir=out, sections=sections)
    settings = {
        "paths": {"trust_file": kit.save_trust(tmp / "trust.json")},
        "profile": host_profile_name(),
        "store": {"path": tmp / "store.db"},
        **config,
    }
    return factory(config=settings, name="d")


def _ask(daemon: Daemon, adapter: str, payload: bytes) -> tuple[int, bytes, str]:
    got = request(daemon.port, "POST", f"/v1/adapters/{adapter}", payload)
    return got.status, got.body, got.headers.get("x-wasmgate-source", "")


def _cli(daemon: Daemon, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "wasmgate", "samples", *args, "--config", str(daemon.config_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_low_confidence_and_disagreement_are_kept_listed_and_exported(
    tmp_path: Path,
    daemon_factory: Callable[..., Daemon],
    cloud: tuple[AnsweringCloud, str],
) -> None:
    fake, url = cloud
    sections = {"fallback": FALLBACK, "samples": KEEP}
    daemon = _daemon(
        tmp_path, daemon_factory, {"probe": sections}, cloud={"url": url, "protocol": "raw"}
    )
    assert _ask(daemon, "probe", b"F-agree")[1:] == (b"none:local", "cloud")
    fake.answer = b"cloud:other"
    assert _ask(daemon, "probe", b"F-differ")[1:] == (b"cloud:other", "cloud")
    assert _ask(daemon, "probe", b"F-over-cap")[0] == 200  # max_per_hour = 2
    assert _ask(daemon, "probe", b"Pconfident")[0] == 200  # no fallback asked: no sample
    assert fake.payloads == [b"F-agree", b"F-differ", b"F-over-cap"]

    rows = json.loads(_cli(daemon, "list", "--json"))
    assert [(r["bundle"], r["version"], r["adapter"], r["reason"]) for r in rows] == [
        ("probe", 1, "probe", "low_confidence"),
        ("probe", 1, "probe", "disagreement"),
    ]
    assert "disagreement" in _cli(daemon, "list")
    jsonl = tmp_path / "out" / "samples.jsonl"
    _cli(daemon, "export", "--out", str(jsonl))
    docs = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [base64.b64decode(d["payload_b64"]) for d in docs] == [b"F-agree", b"F-differ"]
    differ = docs[1]
    assert base64.b64decode(differ["local"]["body_b64"]) == b"none:local"
    assert base64.b64decode(differ["cloud"]["body_b64"]) == b"cloud:other"
    assert differ["cloud"]["source"] == "cloud"
    assert differ["fallback_reason"]
    _cli(daemon, "export", "--out", str(tmp_path / "dir"))
    assert sorted(p.name for p in (tmp_path / "dir").iterdir()) == [f"{d['id']}.json" for d in docs]
    assert daemon.get_json("/v1/status")["components"]["samples"]["skipped"]["hourly"] == 1


def test_manifest_forbids_and_config_only_tightens(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    """No cloud: every ``F`` is a low-confidence sample, if anything may be kept."""
    bundles: dict[str, dict[str, Any]] = {
        "secret": {"samples": {"keep_payload": False, "rate": 1.0}},
        "unsaid": {},
        "zero": {"samples": {"keep_payload": True, "rate": 0.0}},  # config rate 1 cannot loosen
        "tight": {"samples": {"keep_payload": True, "max_per_hour": 5}},  # config caps at 1
    }
    config = {"samples": {"rate": 1.0, "max_per_hour": 1}}
    daemon = _daemon(tmp_path, daemon_factory, bundles, **config)
    markers = {name: f"F-MARK-{name}-91c2".encode() for name in bundles}
    for name, marker in markers.items():
        for _ in range(2):
            assert _ask(daemon, name, marker)[1:] == (b"none:local", "local")
    rows = json.loads(_cli(daemon, "list", "--json"))
    assert [r["bundle"] for r in rows] == ["tight"]  # once: the config's cap of 1 an hour
    daemon.stop()
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))
    assert markers["tight"] in base64.b64decode(_export_one(tmp_path)["payload_b64"])
    for name in ("secret", "unsaid", "zero"):
        assert markers[name] not in on_disk
        assert base64.b64encode(markers[name])[:16] not in on_disk


@pytest.mark.parametrize("custom", [None, "lab/hard/{adapter}"])
async def test_samples_are_shipped_over_mqtt_once_the_broker_has_them(
    tmp_path: Path,
    mosquitto: Broker,
    daemon_factory: Callable[..., Daemon],
    cloud: tuple[AnsweringCloud, str],
    custom: str | None,
) -> None:
    fake, url = cloud
    fake.answer = b'{"label": "pump-worn"}'
    bundles: dict[str, dict[str, Any]] = {
        "probe": {"fallback": FALLBACK, "samples": KEEP},
        "other": {"samples": KEEP},
    }
    config = {**mqtt_config(mosquitto), "cloud": {"url": url, "protocol": "raw"}}
    samples = {"mqtt_topic": custom} if custom else {}
    topic = custom or f"wasmgate/v1/{GW}/samples/{{adapter}}"
    probe, other = topic.format(adapter="probe"), topic.format(adapter="other")
    daemon = _daemon(tmp_path, daemon_factory, bundles, samples=samples, **config)
    await wait_online(mosquitto)
    with Requester(mosquitto.port).connect("lab/hard/#", f"wasmgate/v1/{GW}/samples/#") as sub:
        assert _ask(daemon, "probe", b"F-over-mqtt")[1:] == (b'{"label": "pump-worn"}', "cloud")
        assert _ask(daemon, "other", b"F-no-cloud")[1:] == (b"none:local", "local")
        await until(lambda: len(sub.snapshot()) >= 2, "two samples published")
        got = {r.topic: r for r in sub.snapshot()}
    assert set(got) == {probe, other}
    doc = json.loads(got[probe].payload)
    assert base64.b64decode(doc["payload_b64"]) == b"F-over-mqtt"
    assert (doc["bundle"], doc["version"], doc["reason"]) == ("probe", 1, "disagreement")
    assert base64.b64decode(doc["cloud"]["body_b64"]) == b'{"label": "pump-worn"}'
    assert json.loads(got[other].payload)["cloud"] is None
    assert got[probe].props.get("store-id", "").isdigit()
    # Acked once the broker had them: nothing left on the gateway.
    await until(lambda: stream_status(daemon, "samples")["depth"] == 0, "samples acked")
    assert json.loads(_cli(daemon, "list", "--json")) == []


async def test_samples_are_posted_to_the_cloud_and_retried_when_it_fails(
    tmp_path: Path,
    daemon_factory: Callable[..., Daemon],
    cloud: tuple[AnsweringCloud, str],
) -> None:
    fake, url = cloud
    fake.sample_failures = 2  # the cloud is down for the first tries: kept, then sent once
    cloud_cfg = {"url": url, "protocol": "raw", "breaker_reset_s": 0.3}
    sections = {"fallback": FALLBACK, "samples": KEEP}
    daemon = _daemon(
        tmp_path, daemon_factory, {"probe": sections},
        cloud=cloud_cfg, samples={"http_path": "/ingest/samples"},
    )  # fmt: skip
    fake.answer = b"cloud:other"
    assert _ask(daemon, "probe", b"F-over-http-1")[0] == 200
    assert _ask(daemon, "probe", b"F-over-http-2")[0] == 200
    await until(lambda: len(fake.samples) >= 2, "both samples posted")
    await until(lambda: stream_status(daemon, "samples")["depth"] == 0, "samples acked")
    docs = [json.loads(b) for b in fake.samples]
    assert [base64.b64decode(d["payload_b64"]) for d in docs] == [
        b"F-over-http-1",
        b"F-over-http-2",
    ]
    assert {d["reason"] for d in docs} == {"disagreement"}
    assert fake.sample_failures == 0
    assert daemon.get_json("/v1/status")["components"]["samples_http"] == {
        "shipped": 2,
        "refused": 0,
    }


def _export_one(tmp: Path) -> dict[str, Any]:
    out = tmp / "one.jsonl"
    subprocess.run(
        [sys.executable, "-m", "wasmgate", "samples", "export", "--store", str(tmp / "store.db"),
         "--out", str(out)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (doc,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert isinstance(doc, dict)
    return doc


async def test_samples_are_pushed_to_a_registry_and_wait_while_it_is_down(
    tmp_path: Path, registry: Registry, daemon_factory: Callable[..., Daemon]
) -> None:
    keep = {**KEEP, "max_per_hour": 10}
    bundles: dict[str, dict[str, Any]] = {
        "probe": {"samples": keep},
        "secret": {"samples": {**keep, "keep_payload": False}},
    }
    fast = {"insecure": True, "backoff_s": 0.1, "backoff_max_s": 0.3, "timeout_s": 2.0}
    daemon = _daemon(
        tmp_path, daemon_factory, bundles,
        samples={"oci_repository": f"{registry.address}/lab/samples"}, registry=fast,
    )  # fmt: skip
    assert _ask(daemon, "probe", b"F-oci-1")[1:] == (b"none:local", "local")
    await until(lambda: stream_status(daemon, "samples")["depth"] == 0, "first sample pushed")
    registry.stop()
    for payload in (b"F-oci-2", b"F-oci-3"):
        assert _ask(daemon, "probe", payload)[0] == 200  # the daemon serves on
    assert _ask(daemon, "secret", b"F-MARK-secret-5e1a")[0] == 200

    def oci() -> dict[str, Any]:
        found: dict[str, Any] = daemon.get_json("/v1/status")["components"]["samples_oci"]
        return found

    await until(lambda: oci()["failed"] >= 2, "pushes failed while the registry is down")
    assert stream_status(daemon, "samples")["depth"] == 2
    registry.start()
    await until(lambda: stream_status(daemon, "samples")["depth"] == 0, "pushed once back")
    arts = pulled(registry.address, "lab/samples")
    docs = [d for a in arts for d in a.docs]
    assert [base64.b64decode(d["payload_b64"]) for d in docs] == [
        b"F-oci-1",
        b"F-oci-2",
        b"F-oci-3",
    ]
    assert {(d["bundle"], d["version"], d["reason"]) for d in docs} == {
        ("probe", 1, "low_confidence")
    }
    layers = b"".join(line for a in arts for line in a.lines)
    assert b"F-MARK-secret" not in layers
    assert base64.b64encode(b"F-MARK-secret-5e1a")[:16] not in layers
    assert (oci()["shipped"], oci()["repository"]) == (3, f"{registry.address}/lab/samples")

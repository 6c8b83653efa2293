"""A real daemon as a fleet member: documents over MQTT, bundles from a real registry.

Every part is real: mosquitto, docker-registry, Ed25519 keys in a root-signed trust file,
``wasmgate serve`` subprocesses. Requests check what serves, not only what is reported.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.fleet.daemonkit import (
    GROUP_TOPIC,
    OWN,
    REPORT,
    Factory,
    Site,
    desired,
    publish,
    put_desired,
    retained,
    settled,
    wait_report,
    wait_retained,
)
from tests.runtime.fleet.ocikit import flip_byte, raw_manifest
from tests.runtime.trustkit import echo


def test_offline_gateway_converges_installs_removes_and_leaves_local_alone(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    probe = site.push("probe", 1)
    publish(mosquitto, GROUP_TOPIC, site.document(1, {"probe": (1, probe)}))  # gateway is off
    local = tmp_path / "gw" / "data" / "bundles"
    local.mkdir(parents=True)
    site.bundle("mine", 1).rename(local / "mine-1.wgb")
    daemon = daemon_factory(config=site.config(), name="gw")
    report = wait_report(daemon, settled(1))
    assert report["state"] == "applied"
    assert report["bundles"]["probe"]["state"] == "applied"
    assert report["bundles"]["probe"]["digest"] == probe.rpartition("@")[2]
    assert report["bundles"]["mine"]["state"] == "local"
    assert echo(daemon, "probe") == (200, b"v1:hi")  # requests answer from it
    published = json.loads(retained(mosquitto, REPORT) or b"{}")
    assert (published["serial"], published["state"]) == (1, "applied")
    other = site.push("other", 1)
    publish(mosquitto, OWN, site.document(2, {"other": (1, other)}, gateways=["gw-1"]))
    report = wait_report(daemon, settled(2))
    assert report["bundles"]["probe"]["state"] == "removed"
    assert report["bundles"]["mine"]["state"] == "local"
    assert echo(daemon, "probe")[0] == 404
    assert echo(daemon, "mine-echo") == (200, b"v1:hi")  # never touched
    assert echo(daemon, "other-echo") == (200, b"v1:hi")
    view = desired(daemon)
    assert (view["serial"], view["owned"]) == (2, ["other"])
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert "wasmgate_fleet_serial 2.0" in metrics
    assert 'wasmgate_fleet_bundle_state{bundle="mine",state="local"} 1.0' in metrics
    publish(mosquitto, REPORT, b"")  # the retained report is gone ...
    mosquitto.stop()
    mosquitto.start()  # ... and the daemon's reconnect puts it back
    republished = wait_retained(mosquitto, REPORT)
    assert (republished["serial"], republished["state"]) == (2, "applied")


def test_registry_down_is_pending_then_converges_and_an_altered_blob_changes_nothing(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    daemon = daemon_factory(config=site.config(), name="gw")
    publish(mosquitto, OWN, site.document(1, {"probe": (1, v1)}, gateways=["gw-1"]))
    wait_report(daemon, settled(1))
    registry.stop()
    publish(mosquitto, OWN, site.document(2, {"probe": (2, v2)}, gateways=["gw-1"]))
    report = wait_report(daemon, lambda r: r["serial"] == 2 and r["state"] == "pending")
    assert report["reason"].startswith("registry unreachable")
    assert report["bundles"]["probe"]["state"] == "pending"
    assert echo(daemon, "probe") == (200, b"v1:hi")  # keeps serving meanwhile
    registry.start()
    report = wait_report(daemon, settled(2))
    assert report["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v2:hi")
    v3 = site.push("probe", 3)
    manifest = raw_manifest(registry, "fleet/probe", v3.rpartition("@")[2])
    flip_byte(registry.blob_path(manifest["layers"][0]["digest"]))
    publish(mosquitto, OWN, site.document(3, {"probe": (3, v3)}, gateways=["gw-1"]))
    report = wait_report(daemon, settled(3))
    assert report["state"] == "failed"
    assert report["bundles"]["probe"]["error"].startswith("ArtifactRefused: ")
    assert echo(daemon, "probe") == (200, b"v2:hi")  # nothing changed


def test_sigkill_during_apply_then_restart_converges_never_below_the_serial(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, other = site.push("probe", 1), site.push("other", 1)
    daemon = daemon_factory(config=site.config(), name="gw")
    registry.stop()  # the apply cannot finish: the document is accepted, bundles wait
    publish(mosquitto, OWN, b"")
    status, _ = put_desired(daemon, site.document(7, {"probe": (1, v1), "other": (1, other)}))
    assert status == 202
    wait_report(daemon, lambda r: r["serial"] == 7 and r["state"] == "pending")
    daemon.kill()
    registry.start()
    daemon.start()  # nothing sends the document again: the daemon resumes it
    report = wait_report(daemon, settled(7))
    assert report["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v1:hi")
    older = site.document(6, {"probe": (1, v1)})
    status, body = put_desired(daemon, older)
    assert status == 422
    assert b"FleetReplayError" in body
    assert wait_report(daemon, settled(7))["serial"] == 7


def test_air_gapped_desired_file_applies_at_start_and_on_change_without_mqtt(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    desired_file = tmp_path / "desired.json"
    desired_file.write_bytes(site.document(1, {"probe": (1, v1)}))
    config = site.config(mqtt={"gateway_id": "gw-1"})  # no broker at all
    config["fleet"] = {**config["fleet"], "desired_file": desired_file}
    daemon = daemon_factory(config=config, name="gw")
    assert wait_report(daemon, settled(1))["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v1:hi")
    desired_file.write_bytes(site.document(2, {"probe": (2, v2)}))
    assert wait_report(daemon, settled(2))["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v2:hi")
    desired_file.write_bytes(site.document(1, {"probe": (1, v1)}))  # an old copy put back
    report = wait_report(daemon, lambda r: r["refused"] is not None)
    assert report["refused"]["error"].startswith("FleetReplayError: ")
    assert echo(daemon, "probe") == (200, b"v2:hi")

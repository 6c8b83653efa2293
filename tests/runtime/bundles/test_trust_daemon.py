"""Trust against a real daemon: signer scope over every reachable name, revocation at start-up.

Each tenant has its own key, trusted by a root-signed trust file for its own names only.
The attacks are the ones a hostile tenant (or an operator's revocation) meets in practice:
claiming another tenant's names through routes or models, and revoked bundles coming back
after a SIGHUP, a restart or a SIGKILL.
"""

from __future__ import annotations

import json
import signal
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.reliability.conftest import TOKEN, put_bundle, wait_until
from tests.runtime.trustkit import (
    GATEWAY,
    Tenants,
    bundle_status,
    daemon_config,
    echo,
    mqtt_call,
    serving,
)


def test_signer_cannot_claim_another_tenants_names(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants = Tenants(tmp_path / "kit", {"victim": ["victim", "double"], "acme": ["acme-*"]})
    mqtt = {"host": mosquitto.host, "port": mosquitto.port, "gateway_id": GATEWAY}
    trust = tenants.write_trust(tmp_path / "trust.json")
    daemon = daemon_factory(config=daemon_config(trust, mqtt=mqtt))
    claims: dict[str, dict[str, Any]] = {
        "routes.http 'victim'": {"sections": {"routes": {"http": "victim"}}, "model": False},
        "routes.mqtt 'victim'": {"sections": {"routes": {"mqtt": "victim"}}, "model": False},
        "models[0].name 'double'": {"model_name": "double"},
    }
    for version, (what, kw) in enumerate(claims.items(), start=1):
        evil = tenants.build("acme", "acme-evil", version, **kw)
        status, body = put_bundle(daemon, evil.read_bytes())
        assert status == 422, body
        assert f"may sign only names matching acme-*, not {what}" in body.decode()
    # Refused before the victim arrived, so the victim is not refused as a name conflict;
    # once it serves, a claim on its route is refused for scope, not merely for the conflict.
    assert put_bundle(daemon, tenants.build("victim", "victim", 1).read_bytes())[0] == 201
    evil = tenants.build("acme", "acme-evil", 9, sections={"routes": {"http": "victim"}})
    status, body = put_bundle(daemon, evil.read_bytes())
    assert (status, "not routes.http 'victim'" in body.decode()) == (422, True)
    in_scope = tenants.build("acme", "acme-ok", 1, model_name="acme-double")
    assert put_bundle(daemon, in_scope.read_bytes())[0] == 201

    # The victim is untouched, over HTTP and MQTT; nothing of acme-evil serves.
    assert serving(daemon) == {"victim": 1, "acme-ok": 1}
    assert echo(daemon, "victim") == (200, b"v1:hi")
    assert echo(daemon, "acme-evil")[0] == 404
    assert mqtt_call(mosquitto, "victim", b"Pmqtt") == b"v1:mqtt"
    model = daemon.get_json("/v2/models/double")
    assert model["versions"] == ["1"]


def _revoke_and_check(daemon: Daemon, tenants: Tenants, trust: Path, digests: list[str]) -> None:
    """Revoke tenant ``bad``'s key and ``digests`` (trust v2), SIGHUP."""
    tenants.revoked_keys.append(tenants.key_id("bad"))
    tenants.revoked_bundles.extend(digests)
    tenants.write_trust(trust, version=2)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: echo(daemon, "bad")[0] == 404, 30, "bad unloaded after SIGHUP")
    wait_until(lambda: echo(daemon, "good2")[0] == 404, 30, "good2 unloaded after SIGHUP")
    wait_until(lambda: "staged" not in _good(daemon), 30, "good's candidate aborted")


def _good(daemon: Daemon) -> dict[str, Any]:
    (entry,) = [b for b in bundle_status(daemon)["serving"] if b["name"] == "good"]
    return dict(entry)


def _stage(daemon: Daemon, bundle: Path, percent: int) -> str:
    """Upload ``bundle`` as a staged candidate; its manifest digest."""
    req = urllib.request.Request(
        f"{daemon.url}/v1/bundles?stage={percent}", data=bundle.read_bytes(), method="PUT"
    )
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as r:
        digest: str = json.loads(r.read())["installed"]["digest"]
        return digest


def _only_good_serves(daemon: Daemon) -> None:
    assert serving(daemon) == {"good": 1}
    assert "staged" not in _good(daemon)
    assert {echo(daemon, "good") for _ in range(8)} == {(200, b"v1:hi")}
    assert echo(daemon, "bad")[0] == 404
    assert echo(daemon, "good2")[0] == 404
    failures = {f["name"]: f["message"] for f in bundle_status(daemon)["failures"]}
    assert "revoked" in failures["bad"]
    assert "revoked" in failures["good2"]


def test_revocation_holds_across_sighup_restart_and_sigkill(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants = Tenants(tmp_path / "kit", {"good": ["good*"], "bad": ["bad"]})
    trust = tenants.write_trust(tmp_path / "trust.json")
    daemon = daemon_factory(config=daemon_config(trust), name="d")
    digests = {}
    for tenant, name in (("good", "good"), ("good", "good2"), ("bad", "bad")):
        status, body = put_bundle(daemon, tenants.build(tenant, name, 1, model=False).read_bytes())
        assert status == 201, body
        digests[name] = json.loads(body)["installed"]["digest"]
    assert serving(daemon) == {"good": 1, "good2": 1, "bad": 1}
    candidate = _stage(daemon, tenants.build("good", "good", 2, model=False), 50)
    assert _good(daemon)["staged"]["version"] == 2

    _revoke_and_check(daemon, tenants, trust, [digests["good2"], candidate])
    _only_good_serves(daemon)

    daemon.stop()  # a clean restart: the store still lists them as installed
    daemon.start()
    _only_good_serves(daemon)

    daemon.kill()  # SIGKILL: nothing is written on the way down
    daemon.start()
    _only_good_serves(daemon)


def _expiring(daemon: Daemon, tenants: Tenants, seconds: int) -> None:
    """Install ``brief`` expiring ``seconds`` after it was built (rebuilt if a slow machine
    let it expire before the upload finished)."""
    for _ in range(3):
        brief = tenants.build("t", "brief", 1, model=False, expires_in=timedelta(seconds=seconds))
        status, body = put_bundle(daemon, brief.read_bytes())
        if status == 201:
            return
        assert b"expired" in body, body
    raise AssertionError("could not install an expiring bundle in time")


@pytest.mark.parametrize("policy", ["stop", "warn"])
def test_expired_bundle_follows_the_expiry_policy(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], policy: str
) -> None:
    tenants = Tenants(tmp_path / "kit", {"t": ["*"]})
    trust = tenants.write_trust(tmp_path / "trust.json")
    env = {"WASMGATE_TRUST__EXPIRY": policy}  # the env var reaches trust.expiry
    daemon = daemon_factory(config=daemon_config(trust), env=env, name="d")
    keep = tenants.build("t", "keep", 1, model=False)
    assert put_bundle(daemon, keep.read_bytes())[0] == 201
    _expiring(daemon, tenants, 10)
    assert echo(daemon, "brief") == (200, b"v1:hi")

    action, code = ("serving", 200) if policy == "warn" else ("stopped", 404)
    wait_until(lambda: "brief" in bundle_status(daemon)["expired"], 60, "brief reported expired")
    for restart in (False, True):
        if restart:
            daemon.stop()
            daemon.start()
        assert bundle_status(daemon)["expired"]["brief"]["action"] == action
        assert "expired at" in bundle_status(daemon)["expired"]["brief"]["message"]
        assert echo(daemon, "brief")[0] == code
        assert echo(daemon, "keep") == (200, b"v1:hi")
        with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert f'wasmgate_bundle_expired{{action="{action}",bundle="brief"}} 1.0' in metrics

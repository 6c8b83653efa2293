"""The clock floor against a real daemon: a tenant's future claim cannot poison it.

A scoped signer's bundle issued ten years ahead is refused (and would otherwise have moved
the persistent floor, after which every tenant's bundle looked expired). The floor is shown
in ``/v1/status`` (section ``trust``); a floor that did go too far ahead (left by an older
daemon) is repaired only by a new root-signed trust version with ``clock_floor``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import put_bundle, wait_until
from tests.runtime.trustkit import Tenants, daemon_config, echo
from wasmgate.signing import StateFile


def _floor(daemon: Daemon) -> str | None:
    floor: str | None = daemon.get_json("/v1/status")["components"]["trust"]["clock_floor"]
    return floor


def _put(daemon: Daemon, tenants: Tenants, tenant: str, name: str, version: int) -> int:
    bundle = tenants.build(tenant, name, version, model=False)
    return put_bundle(daemon, bundle.read_bytes())[0]


def test_future_dated_bundle_is_refused_and_the_floor_holds(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants = Tenants(tmp_path / "kit", {"acme": ["acme-*"], "beta": ["beta-*"]})
    trust = tenants.write_trust(tmp_path / "trust.json")
    daemon = daemon_factory(config=daemon_config(trust), name="d")
    assert _put(daemon, tenants, "beta", "beta-one", 1) == 201
    floor = _floor(daemon)
    assert floor is not None
    assert datetime.fromisoformat(floor) <= datetime.now(UTC)

    future = datetime.now(UTC) + timedelta(days=3650)
    evil = tenants.build("acme", "acme-evil", 1, model=False, now=future)
    status, body = put_bundle(daemon, evil.read_bytes())
    assert status == 422
    assert b"in the future" in body
    assert _floor(daemon) == floor
    assert echo(daemon, "acme-evil")[0] == 404

    daemon.stop()
    daemon.start()
    assert _floor(daemon) == floor
    assert _put(daemon, tenants, "beta", "beta-one", 2) == 201  # other tenants still install
    assert _put(daemon, tenants, "acme", "acme-ok", 1) == 201
    assert echo(daemon, "beta-one") == (200, b"v2:hi")


def test_a_poisoned_floor_is_shown_and_repaired_by_root(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants = Tenants(tmp_path / "kit", {"beta": ["beta-*"]})
    trust = tenants.write_trust(tmp_path / "trust.json")
    daemon = daemon_factory(config=daemon_config(trust), name="d")
    assert _put(daemon, tenants, "beta", "beta-one", 1) == 201
    daemon.stop()
    # What a daemon before the fix left behind: the floor ten years ahead.
    state = StateFile(daemon.workdir / "data" / "state")
    doc = state.load()
    assert doc is not None
    poisoned = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3650)
    doc.clock_floor = poisoned
    state.save(doc)

    daemon.start()
    assert _floor(daemon) == poisoned.isoformat()
    assert _put(daemon, tenants, "beta", "beta-one", 2) == 422  # "expired" against the floor
    assert echo(daemon, "beta-one") == (200, b"v1:hi")  # trust.expiry = warn keeps it

    repaired = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    tenants.write_trust(trust, version=2, clock_floor=repaired)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: _floor(daemon) == repaired.isoformat(), 30, "floor repaired")
    assert "clock floor set to" in daemon.log()
    assert _put(daemon, tenants, "beta", "beta-one", 2) == 201
    daemon.stop()
    daemon.start()  # the repair is applied once: the floor only moves up from here
    floor = _floor(daemon)
    assert floor is not None
    assert repaired < datetime.fromisoformat(floor) <= datetime.now(UTC)

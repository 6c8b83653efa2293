"""Signed downgrades: a lower version installs only with a fleet permission for exactly it.

The ``store`` fixture has ``digits`` 5 installed (floor 5). Every refusal leaves installed
versions and floors unchanged, also after re-opening the store (a restart).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.signing.conftest import DYING_REPLACE, MAX_BUNDLE, Kit, kill_child, snapshot
from tests.signing.fleetkit import FleetKit
from wasmgate.signing import (
    BundleStore,
    Downgrade,
    FleetDowngradeError,
    FleetScopeError,
    RollbackError,
    SigningError,
    TrustStore,
    verify_fleet,
)


def reopen(store: BundleStore, trust: TrustStore | None = None) -> BundleStore:
    return BundleStore(store.state_dir, trust or store.trust, max_bundle_bytes=MAX_BUNDLE)


def refused(
    store: BundleStore,
    data: bytes,
    downgrades: Sequence[Downgrade] | None,
    exc: type[SigningError],
) -> str:
    before = snapshot(store)
    with pytest.raises(SigningError) as info:
        store.install(data, downgrades=downgrades)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    assert snapshot(store) == before
    assert snapshot(reopen(store)) == before
    return str(info.value)


def permit(version: int, name: str = "digits") -> list[Downgrade]:
    return [Downgrade(name=name, version=version)]


def test_local_install_of_a_lower_version_stays_a_rollback(kit: Kit, store: BundleStore) -> None:
    assert "version 4 < installed 5" in refused(store, kit.build(4), None, RollbackError)


@pytest.mark.parametrize(
    "downgrades",
    [[], permit(3), permit(5), permit(4, "digits-b"), permit(4, "Digits")],
    ids=["none", "other-version", "floor-version", "other-name", "name-case"],
)
def test_fleet_install_without_matching_permission(
    kit: Kit, store: BundleStore, downgrades: list[Downgrade]
) -> None:
    msg = refused(store, kit.build(4), downgrades, FleetDowngradeError)
    assert "version 4 < installed 5, and no signed downgrade permits it" in msg
    assert isinstance(FleetDowngradeError("x", "y"), RollbackError)  # handled as a rollback


def test_permitted_downgrade_lowers_the_floor_across_restart(
    kit: Kit, store: BundleStore, caplog: pytest.LogCaptureFixture
) -> None:
    four = kit.build(4)
    with caplog.at_level(logging.WARNING, "wasmgate.signing"):
        done = store.install(four, downgrades=permit(4))
    assert done.downgraded_from == 5
    assert "downgraded bundle digits@4 from version 5" in caplog.text
    again = reopen(store)
    assert snapshot(again)[1] == {"digits": 4}
    assert [b.manifest.version for b in again.installed()] == [4]
    assert again.install(four).downgraded_from is None  # same bundle again: no downgrade
    refused(again, kit.build(3), None, RollbackError)  # the floor follows the install
    refused(again, kit.build(3), permit(4), FleetDowngradeError)
    assert again.install(kit.build(5)).manifest.version == 5  # upward again, no permission


def test_permission_for_a_higher_version_is_a_plain_install(kit: Kit, store: BundleStore) -> None:
    done = store.install(kit.build(7), downgrades=permit(7))
    assert done.downgraded_from is None
    assert store.floors() == {"digits": 7}


def test_downgrade_is_never_staged(kit: Kit, store: BundleStore) -> None:
    before = snapshot(store)
    staged = store.stage(kit.build(4), downgrades=permit(4))
    assert staged.downgraded_from == 5
    with pytest.raises(FleetDowngradeError, match="never staged"):
        store.commit(staged, percent=10)
    assert snapshot(store) == before
    assert store.candidates() == []
    store.commit(staged)
    assert store.floors() == {"digits": 4}


def test_commit_rechecks_with_the_staged_permission(kit: Kit, store: BundleStore) -> None:
    """Discarding forgets the permission; a later stage of the same bytes needs its own."""
    four = kit.build(4)
    store.discard(store.stage(four, downgrades=permit(4)))
    refused(store, four, [], FleetDowngradeError)


def test_downgrade_replaces_a_staged_candidate(kit: Kit, store: BundleStore) -> None:
    store.commit(store.stage(kit.build(6)), percent=10)
    store.install(kit.build(4), downgrades=permit(4))
    assert store.candidates() == []
    assert reopen(store).floors() == {"digits": 4}


def test_verified_fleet_document_drives_the_downgrade(kit: Kit, tmp_path: Path) -> None:
    """End to end in the signing layer: the document's own downgrades permit it, once."""
    fk = FleetKit(signer=kit.key)
    trust = fk.trust()
    store = BundleStore(tmp_path / "fleet-state", trust, max_bundle_bytes=MAX_BUNDLE)
    store.install(kit.build(5))
    now = datetime.now(UTC)
    up = verify_fleet(fk.signed(fk.doc(1, {"digits": 4})), trust, last_serial=None, now=now)
    refused(store, kit.build(4), up.downgrades, FleetDowngradeError)
    down = fk.signed(fk.doc(2, {"digits": 4}, downgrades={"digits": 4}))
    doc = verify_fleet(down, trust, last_serial=1, now=now)
    assert store.install(kit.build(4), downgrades=doc.downgrades).downgraded_from == 5


def fleet_store(kit: Kit, tmp_path: Path, names: list[str]) -> BundleStore:
    """A store under a root-signed trust with a fleet role for ``names``; digits 5 installed."""
    trust = FleetKit(signer=kit.key, names=names).trust()
    store = BundleStore(tmp_path / "fleet-state", trust, max_bundle_bytes=MAX_BUNDLE)
    store.install(kit.build(5))
    return store


@pytest.mark.parametrize(
    ("names", "asked", "message"),
    [
        (["digits*"], ("digits-b", 6, "digits"), "asks for digits-b@6"),
        (["digits*"], ("digits", 7, "digits"), "asks for digits@7"),
        (["digits-b"], ("digits-b", 6, "digits-b"), "routes.http 'digits' is outside"),
    ],
    ids=["name", "version", "claimed-route"],
)
def test_fleet_install_of_another_bundle_than_asked(
    kit: Kit, tmp_path: Path, names: list[str], asked: tuple[str, int, str], message: str
) -> None:
    """A ref pointing at another (validly signed) bundle, or at one that also claims a name
    outside the fleet role: refused before anything is stored. ``asked``: the document's
    name and version, and the name of the bundle actually found at the ref."""
    store = fleet_store(kit, tmp_path, names)
    data = kit.build(6, name=asked[2])
    before = snapshot(store)
    with pytest.raises(FleetScopeError, match=message):
        store.install(data, downgrades=[], expect=asked[:2])
    assert snapshot(reopen(store)) == before
    assert store.install(data).manifest.version == 6  # a local install: signer scope only


def test_fleet_install_of_the_bundle_asked_for(kit: Kit, tmp_path: Path) -> None:
    store = fleet_store(kit, tmp_path, ["digits*"])
    assert store.install(kit.build(6), expect=("digits", 6)).manifest.version == 6
    plain = TrustStore.empty().with_signer(kit.key.verify_key, ["digits*"], {})
    unsigned = BundleStore(tmp_path / "plain", plain, max_bundle_bytes=MAX_BUNDLE)
    with pytest.raises(FleetScopeError):  # no fleet role: no fleet install at all
        unsigned.install(kit.build(6), expect=("digits", 6))


CHILD = """
import pathlib, sys
from wasmgate.signing import BundleStore, Downgrade, TrustStore

state_dir, trust_file, bundle, point = sys.argv[1:5]
{dying_replace}
store = BundleStore(pathlib.Path(state_dir), TrustStore.load(pathlib.Path(trust_file)),
                    max_bundle_bytes=10**9)
store.install(pathlib.Path(bundle), downgrades=[Downgrade(name="digits", version=4)])
sys.exit(0)
""".replace("{dying_replace}", DYING_REPLACE)


@pytest.mark.parametrize(("point", "expected"), [("state-rename", 5), ("after-state", 4)])
def test_killed_mid_downgrade(
    kit: Kit, store: BundleStore, tmp_path: Path, point: str, expected: int
) -> None:
    """SIGKILL-like death at the commit point: the old floor or the new one, never between."""
    bundle = tmp_path / "digits-4.wgb"
    bundle.write_bytes(kit.build(4))
    kill_child(CHILD, store, bundle, point)
    installed, floors = snapshot(reopen(store))
    assert [v for _, v, _ in installed] == [expected]
    assert floors == {"digits": expected}


def test_damaged_state_after_a_downgrade_falls_back_up(kit: Kit, store: BundleStore) -> None:
    """Recovery from the records never lowers a floor: the fleet must permit it again."""
    store.install(kit.build(4), downgrades=permit(4))
    (store.state_dir / "state.json").write_bytes(b"{damaged")
    recovered = reopen(store)
    assert recovered.state_recovered
    assert recovered.floors() == {"digits": 5}
    refused(recovered, kit.build(4), None, RollbackError)

"""Anti-rollback state: atomic writes, damaged copies, refusal or rebuild, clock floor."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.signing.conftest import MAX_BUNDLE, Kit, snapshot
from wasmgate.signing import (
    BundleStore,
    ExpiredError,
    RollbackError,
    StateCorruptedError,
    StateDoc,
    StateFile,
    TrustStore,
)
from wasmgate.signing.state import _encode

H = "ab" * 32


@pytest.fixture
def v6(kit: Kit, store: BundleStore) -> BundleStore:
    store.install(kit.build(6))
    return store


def _reopen(store: BundleStore, *, repair_state: bool = False) -> BundleStore:
    return BundleStore(
        store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE, repair_state=repair_state
    )


def test_state_files_written_with_previous_copy(v6: BundleStore) -> None:
    state = StateFile(v6.state_dir)
    doc = state.load()
    assert doc is not None
    assert doc.bundles["digits"].floor == 6
    prev = json.loads((v6.state_dir / "state.prev.json").read_text())
    assert prev["state"]["bundles"]["digits"]["floor"] == 5
    assert not [p for p in v6.state_dir.iterdir() if p.name.endswith(".tmp")]


def test_damaged_state_uses_previous_copy_and_records(kit: Kit, v6: BundleStore) -> None:
    (v6.state_dir / "state.json").write_text("{ garbage")
    reopened = _reopen(v6)
    assert reopened.state_recovered
    assert reopened.floors() == {"digits": 6}
    with pytest.raises(RollbackError):
        reopened.install(kit.build(5))


def test_checksum_catches_edited_floor(kit: Kit, v6: BundleStore) -> None:
    path = v6.state_dir / "state.json"
    path.write_text(path.read_text().replace('"floor": 6', '"floor": 1'))
    reopened = _reopen(v6)
    assert reopened.floors() == {"digits": 6}


def test_both_copies_damaged_is_a_clear_refusal(kit: Kit, v6: BundleStore) -> None:
    for name in ("state.json", "state.prev.json"):
        (v6.state_dir / name).write_bytes(b"\0" * 10)
    with pytest.raises(StateCorruptedError, match="refusing to reset"):
        _reopen(v6)
    repaired = _reopen(v6, repair_state=True)
    assert repaired.floors() == {"digits": 6}
    assert [b.manifest.version for b in repaired.installed()] == [6]
    with pytest.raises(RollbackError):
        repaired.install(kit.build(5))


def test_deleted_state_with_records_is_refused(v6: BundleStore) -> None:
    for name in ("state.json", "state.prev.json"):
        (v6.state_dir / name).unlink()
    with pytest.raises(StateCorruptedError, match="install record"):
        _reopen(v6)
    assert _reopen(v6, repair_state=True).floors() == {"digits": 6}


def test_fresh_store_is_empty(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "s", TrustStore.empty(), max_bundle_bytes=MAX_BUNDLE)
    assert store.installed() == []
    assert not store.state_recovered


def test_clock_floor_defeats_a_clock_at_1970(kit: Kit, store: BundleStore) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    old = kit.build(6, now=datetime.now(UTC) - timedelta(days=30), expires_in=timedelta(days=2))
    at_1970 = BundleStore(
        store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE, clock=lambda: epoch
    )
    before = snapshot(at_1970)
    with pytest.raises(ExpiredError):
        at_1970.install(old)
    assert snapshot(at_1970) == before


def test_second_store_on_same_dir_sees_installs(kit: Kit, store: BundleStore) -> None:
    other = _reopen(store)
    other.install(kit.build(7))
    with pytest.raises(RollbackError, match="installed 7"):
        store.install(kit.build(6))


# The schema is as strict as the checksum: a copy whose values have the wrong JSON type (a
# bool for a number, text for a number, a naive time), an unknown field or a digest with a
# trailing newline is damaged, never read as something else.
def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    """A state file with a valid checksum over ``state``, whatever it holds."""
    canon = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    body = {"checksum": hashlib.sha256(canon).hexdigest(), "state": state}
    (state_dir / "state.json").write_text(json.dumps(body))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("bundles", "digits", "floor"), True),
        (("bundles", "digits", "floor"), "5"),
        (("bundles", "digits", "floor_digest"), H + "\n"),
        (("bundles", "digits", "surprise"), 1),
        (("bundles", "digits", "active"), {"version": 5, "digest": H, "surprise": 1}),
        (("clock_floor",), "2024-01-01T00:00:00"),
    ],
)
def test_state_of_the_wrong_type_is_corrupt_not_reset(
    tmp_path: Path, path: tuple[str, ...], value: object
) -> None:
    """A checksummed copy with a bad value is refused like a damaged one: floors stay."""
    doc = StateDoc(clock_floor=datetime.now(UTC) - timedelta(days=1))
    good = json.loads(_encode(doc))["state"] | {
        "bundles": {"digits": {"floor": 5, "floor_digest": H}}
    }
    _write_state(tmp_path, good)
    loaded = StateFile(tmp_path).load()
    assert loaded is not None
    assert loaded.bundles["digits"].floor == 5
    bad = copy.deepcopy(good)
    cur = bad
    for step in path[:-1]:
        cur = cur[step]
    cur[path[-1]] = value
    _write_state(tmp_path, bad)
    with pytest.raises(StateCorruptedError, match="refusing to reset"):
        StateFile(tmp_path).load()

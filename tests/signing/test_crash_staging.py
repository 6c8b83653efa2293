"""Power loss during a staged release: a process killed (os._exit) at each write of stage,
promote or abort leaves the state before or after that step, never a mix.

Version 5 of ``digits`` is installed; the child stages version 6 at 10 %, or promotes or
aborts an already staged version 6, and dies at a chosen point. The parent re-opens the
store and checks (active version, staged candidate and share, floor), then that the step
can be done again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.signing.conftest import DYING_REPLACE, MAX_BUNDLE, Kit, kill_child
from wasmgate.signing import BundleStore

CHILD = """
import os, pathlib, sys
from wasmgate.signing import BundleStore, TrustStore

state_dir, trust_file, bundle, step, point = sys.argv[1:6]
{dying_replace}
store = BundleStore(pathlib.Path(state_dir), TrustStore.load(pathlib.Path(trust_file)),
                    max_bundle_bytes=10**9)
if step == "stage":
    store.commit(store.stage(pathlib.Path(bundle)), percent=10)
elif step == "promote":
    store.promote("digits")
else:
    store.abort("digits")
sys.exit(0)
""".replace("{dying_replace}", DYING_REPLACE)

State = tuple[int, tuple[int, int] | None, int]
STAGED: State = (5, (6, 10), 5)
BEFORE: dict[str, State] = {"stage": (5, None, 5), "promote": STAGED, "abort": STAGED}
AFTER: dict[str, State] = {"stage": STAGED, "promote": (6, None, 6), "abort": (5, None, 5)}


def _state(store: BundleStore) -> State:
    (active,) = store.installed()
    staged = [(c.bundle.manifest.version, c.percent) for c in store.candidates()]
    return active.manifest.version, staged[0] if staged else None, store.floors()["digits"]


def _do(store: BundleStore, step: str, bundle: Path) -> None:
    if step == "stage":
        store.commit(store.stage(bundle), percent=10)
    elif step == "promote":
        store.promote("digits")
    else:
        store.abort("digits")


@pytest.mark.parametrize(
    ("step", "point"),
    [
        ("stage", "record"),
        ("stage", "state-rename"),
        ("stage", "after-state"),
        ("promote", "record"),
        ("promote", "state-rename"),
        ("promote", "after-state"),
        ("abort", "state-rename"),
        ("abort", "after-state"),
    ],
)
def test_killed_mid_release_step(
    kit: Kit, store: BundleStore, tmp_path: Path, step: str, point: str
) -> None:
    bundle = tmp_path / "digits-6.wgb"
    bundle.write_bytes(kit.build(6))
    if step != "stage":
        _do(store, "stage", bundle)
    kill_child(CHILD, store, bundle, step, point)
    reopened = BundleStore(store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE)
    expected = AFTER[step] if point == "after-state" else BEFORE[step]
    assert _state(reopened) == expected
    assert not reopened.state_recovered
    reopened.gc()  # the candidate's blobs are kept
    if expected != AFTER[step]:
        _do(reopened, step, bundle)
        assert _state(reopened) == AFTER[step]
    assert list(store.state_dir.rglob("*.tmp")) == []


def test_recovered_floors_ignore_staged_candidates(kit: Kit, store: BundleStore) -> None:
    """Floors rebuilt from the install records: a candidate never promoted does not count."""
    store.commit(store.stage(kit.build(6)), percent=10)
    for name in ("state.json", "state.prev.json"):
        (store.state_dir / name).write_bytes(b"{")
    rebuilt = BundleStore(
        store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE, repair_state=True
    )
    assert rebuilt.floors() == {"digits": 5}
    assert [b.manifest.version for b in rebuilt.installed()] == [5]

"""Power loss during install: a process killed (os._exit) mid-commit leaves a usable store.

The child process installs version 6 over an installed version 5 and dies at a chosen point
of the commit. The parent re-opens the store: version 5 is still the installed version (or
version 6 when the commit point was passed), nothing is half-installed, and the same bundle
installs cleanly afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.signing.conftest import DYING_REPLACE, MAX_BUNDLE, Kit, kill_child, snapshot
from wasmgate.signing import BundleStore

CHILD = """
import os, pathlib, sys
from wasmgate.signing import BundleStore, TrustStore
import wasmgate.signing.state as state_mod

state_dir, trust_file, bundle, point = sys.argv[1:5]
{dying_replace}

def dying_save(self, doc):
    os._exit(9)

if point == "before-state":
    state_mod.StateFile.save = dying_save
store = BundleStore(pathlib.Path(state_dir), TrustStore.load(pathlib.Path(trust_file)),
                    max_bundle_bytes=10**9)
store.install(pathlib.Path(bundle))
sys.exit(0)
""".replace("{dying_replace}", DYING_REPLACE)


@pytest.mark.parametrize(
    ("point", "expected"),
    [("blob", 5), ("before-state", 5), ("state-rename", 5), ("after-state", 6)],
)
def test_killed_mid_install(
    kit: Kit, store: BundleStore, tmp_path: Path, point: str, expected: int
) -> None:
    bundle = tmp_path / "digits-6.wgb"
    bundle.write_bytes(kit.build(6))
    kill_child(CHILD, store, bundle, point)
    reopened = BundleStore(store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE)
    installed, floors = snapshot(reopened)
    assert [v for _, v, _ in installed] == [expected]
    assert floors == {"digits": expected}
    assert not reopened.state_recovered
    assert list((store.state_dir / "tmp").iterdir()) == []
    assert list(store.state_dir.rglob("*.tmp")) == []
    assert reopened.install(bundle).manifest.version == 6
    assert [b.manifest.version for b in reopened.installed()] == [6]

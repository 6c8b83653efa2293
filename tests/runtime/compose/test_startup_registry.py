"""Start-up loading: the store's bundles load side by side, in an order that keeps versions.

A restart loads every installed bundle at once (one load per core), then installs the
bundle files (a file must not re-supply a stored bundle's missing blobs before its load has
named them: tests/reliability/test_state_dir.py), so what serves after the start is what a
one-at-a-time start served: the newest version, never an older one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import open_stack
from wasmgate.runtime.bundles import installer as installer_module
from wasmgate.runtime.bundles.loader import BlobSource, LoaderDeps, load_bundle
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.manifest import Manifest

DEADLOCK_S = 60  # only a deadlock guard: two loads meet at once when they overlap


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


def _rendezvous(monkeypatch: pytest.MonkeyPatch, parties: int) -> list[str]:
    """Make each start-up load wait for ``parties`` loads to be running together (a load
    one at a time breaks the barrier); returns the names loaded, in order."""
    barrier = threading.Barrier(parties, timeout=DEADLOCK_S)
    loaded: list[str] = []

    def load(deps: LoaderDeps, blobs: BlobSource, man: Manifest, digest: str) -> LoadedBundle:
        barrier.wait()
        loaded.append(man.name)
        return load_bundle(deps, blobs, man, digest)

    monkeypatch.setattr(installer_module, "load_bundle", load)
    return loaded


async def _install(tmp: Path, kit: BundleKit, state: Path, *files: Path) -> None:
    async with open_stack(tmp, kit, start=files, state_dir=state):
        pass


async def test_stored_bundles_load_side_by_side(
    tmp_path: Path, kit: BundleKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    echo = kit.build("other", 1, model=False, sections={"routes": {"http": "echo"}})
    await _install(tmp_path, kit, state, kit.build("probe", 1), echo)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # a load per core; CI may have one
    loaded = _rendezvous(monkeypatch, 2)
    async with open_stack(tmp_path, kit, state_dir=state) as st:
        assert sorted(loaded) == ["other", "probe"]
        assert st.service.adapter_names() == ["echo", "probe"]
        assert (await st.service.run_adapter(AdapterRequest("echo", b"Phi"))).body == b"v1:hi"


async def test_a_newer_file_still_replaces_the_stored_version(
    tmp_path: Path, kit: BundleKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    await _install(tmp_path, kit, state, kit.build("probe", 1, tag="v1"))
    loaded = _rendezvous(monkeypatch, 1)
    newer = kit.build("probe", 2, tag="v2")
    async with open_stack(tmp_path, kit, start=(newer,), state_dir=state) as st:
        assert loaded == ["probe", "probe"]  # the stored v1 first, then the file's v2
        assert (await st.service.run_adapter(AdapterRequest("probe", b"M"))).version == 2
        assert [(b["name"], b["version"]) for b in st.registry.status()] == [("probe", 2)]
    async with open_stack(tmp_path, kit, state_dir=state) as st:
        assert (await st.service.run_adapter(AdapterRequest("probe", b"M"))).version == 2

"""Start-up and the bundle files: one unchanged since it was verified, holding the bundle that
serves, is not read again — unless installing it could have had another outcome.

Real store, registry and bundles; `BundleStore.stage` is only watched (each call still runs).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import open_stack
from wasmgate.runtime.ops.config import LimitSettings
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.signing.seen import RACY_NS
from wasmgate.signing.store import BundleStore

LIFETIME_S = 8  # the racily-clean wait (2 s) and a first start on a loaded machine fit in it


def _staged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The labels of the sources `BundleStore.stage` reads from now on."""
    calls: list[str] = []
    real = BundleStore.stage

    def stage(self: BundleStore, data: bytes | Path, **kw: object) -> object:
        calls.append(data.name if isinstance(data, Path) else "<bytes>")
        return real(self, data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(BundleStore, "stage", stage)
    return calls


def _settle(path: Path) -> None:
    time.sleep(max(0, path.stat().st_ctime_ns + RACY_NS - time.time_ns()) / 1e9 + 0.05)


async def test_an_unchanged_serving_file_is_not_read_and_remove_still_deletes_it(
    tmp_path: Path, kit: BundleKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, probe = tmp_path / "state", kit.build("probe", 1)
    _settle(probe)
    async with open_stack(tmp_path, kit, start=(probe,), state_dir=state):
        pass  # installed from the file, which is remembered
    staged = _staged(monkeypatch)
    async with open_stack(tmp_path, kit, start=(probe,), state_dir=state) as st:
        assert staged == []
        assert (await st.service.run_adapter(AdapterRequest("probe", b"Phi"))).body == b"v1:hi"
        await st.registry.remove("probe")
    assert not probe.exists()  # the skipped file is still the bundle's origin


async def test_a_file_of_an_expired_serving_bundle_is_verified_again(
    tmp_path: Path, kit: BundleKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expired serves on under the default policy ("warn"), but an install of its file is
    refused: that refusal must still be recorded, so the file is read."""
    state = tmp_path / "state"
    probe = kit.build("probe", 1, expires_in=timedelta(seconds=LIFETIME_S))
    _settle(probe)
    async with open_stack(tmp_path, kit, start=(probe,), state_dir=state) as st:
        assert st.service.adapter_names() == ["probe"]  # installed before it expired
    later = datetime.now(UTC) + timedelta(seconds=LIFETIME_S + 1)  # the store's clock moved on
    staged = _staged(monkeypatch)
    async with open_stack(
        tmp_path, kit, start=(probe,), state_dir=state, clock=lambda: later
    ) as st:
        assert staged == [probe.name]
        assert "expired" in st.registry.failures()[0].message
        assert (await st.service.run_adapter(AdapterRequest("probe", b"Phi"))).body == b"v1:hi"


async def test_a_file_over_a_lowered_size_cap_is_verified_again(
    tmp_path: Path, kit: BundleKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, probe = tmp_path / "state", kit.build("probe", 1)
    _settle(probe)
    async with open_stack(tmp_path, kit, start=(probe,), state_dir=state):
        pass
    staged = _staged(monkeypatch)
    lower = LimitSettings(max_bundle_bytes=probe.stat().st_size - 1)
    async with open_stack(tmp_path, kit, start=(probe,), state_dir=state, limits=lower) as st:
        assert staged == [probe.name]  # refused by the cap, as before the store remembered it
        assert "cap" in st.registry.failures()[0].message

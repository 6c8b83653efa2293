"""Registry: install pipeline, atomic switch with draining, staged activation, removal, watcher."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name, open_stack
from wasmgate.runtime.bundles.watcher import DirWatcher
from wasmgate.runtime.errors import BundleRejected, NotFound
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.sandbox.models import Array
from wasmgate.signing.keys import key_id_of

SLOW = {"limits": {"deadline_ms": 20_000}}


def probe(payload: bytes = b"M") -> AdapterRequest:
    return AdapterRequest("probe", payload)


async def test_start_serves_store_and_directory(tmp_path: Path, kit: BundleKit) -> None:
    state = tmp_path / "state"
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),), state_dir=state):
        pass
    other = kit.build("other", 1, model=False, sections={"routes": {"http": "echo"}})
    async with open_stack(tmp_path, kit, start=(other,), state_dir=state) as st:
        assert st.service.adapter_names() == ["echo", "probe"]  # probe came from the store
        assert (await st.service.run_adapter(AdapterRequest("echo", b"Phi"))).body == b"v1:hi"
        assert [b["name"] for b in st.registry.status()] == ["other", "probe"]


async def test_untrusted_bundle_is_refused_and_old_keeps_serving(
    tmp_path: Path, kit: BundleKit
) -> None:
    stranger = BundleKit(tmp_path / "stranger")
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        with pytest.raises(BundleRejected, match=key_id_of(stranger.key.verify_key)[:16]):
            await st.install(stranger.build("probe", 2))
        assert (await st.service.run_adapter(probe())).body == b"v1:2,4,6,8"
        [failure] = st.registry.failures()
        assert not failure.ok
        assert failure.source == "test"


async def test_selftest_gates_the_switch(tmp_path: Path, kit: BundleKit) -> None:
    state = tmp_path / "state"
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),), state_dir=state) as st:
        with pytest.raises(BundleRejected, match="selftest returned status 2"):
            await st.install(kit.build("probe", 2, selftest=b"E"))
        assert (await st.service.run_adapter(probe())).version == 1
        [entry] = st.registry.status()
        assert "selftest" in entry["last_error"]["message"]
        [v1] = st.store.installed()
        kept = {p.name for p in (state / "blobs").iterdir()}
        assert kept == {f.sha256 for f in v1.manifest.files.values()}  # v2's were collected
    # the failed version was never recorded: after a restart the good one still serves
    async with open_stack(tmp_path, kit, state_dir=state) as st:
        assert (await st.service.run_adapter(probe())).version == 1
        assert st.store.floors() == {"probe": 1}
        await st.install(kit.build("probe", 3, selftest=b"B", expect_status=1))
        assert (await st.service.run_adapter(probe())).version == 3
        assert "last_error" not in st.registry.status()[0]


async def test_adapter_blob_is_rehashed_before_compiling(tmp_path: Path, kit: BundleKit) -> None:
    state = tmp_path / "state"
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),), state_dir=state) as st:
        [item] = st.store.installed()
        assert item.manifest.adapter is not None
        sha = item.manifest.file_digest(item.manifest.adapter.file)
    blob = state / "blobs" / sha
    blob.chmod(0o600)
    blob.write_bytes(blob.read_bytes() + b"\0")
    async with open_stack(tmp_path, kit, state_dir=state) as st:
        assert st.service.adapter_names() == []
        [failure] = st.registry.failures()
        assert f"blob {sha}: content now hashes to" in failure.message


@pytest.mark.parametrize(
    ("sections", "top", "message"),
    [
        ({"routes": {"http": "probe"}}, {}, "name 'probe' is already served by bundle 'probe'"),
        ({}, {"min_daemon_version": "99.0.0"}, "needs wasmgate >= 99.0.0"),
        ({"targets": {"profiles": ["no-such-board"]}}, {}, "targets profiles"),
    ],
)
async def test_refusals_before_the_switch(
    tmp_path: Path,
    kit: BundleKit,
    sections: dict[str, dict[str, object]],
    top: dict[str, object],
    message: str,
) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        with pytest.raises(BundleRejected, match=message):
            await st.install(kit.build("rival", 1, model=False, sections=sections, top=top))
        assert st.service.adapter_names() == ["probe"]
        assert (await st.service.run_adapter(probe())).version == 1


async def test_profile_target_matching_this_host_is_accepted(
    tmp_path: Path, kit: BundleKit
) -> None:
    targets = {"targets": {"profiles": [host_profile_name()]}}
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1, sections=targets),)) as st:
        assert st.service.adapter_names() == ["probe"]


async def test_in_flight_requests_finish_on_the_old_version(
    tmp_path: Path, kit: BundleKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request inside version 1 when version 2 is installed finishes on version 1, which
    closes after it. The request is held inside its model call by the test (not slowed by
    a spin the install might outlast on a busy machine); adapters run off the loop so the
    held call blocks a worker thread, not the test."""
    async with open_stack(
        tmp_path, kit, start=(kit.build("probe", 1, sections=SLOW),),
        inline_adapters=InlinePolicy(cap_s=0),
    ) as st:  # fmt: skip
        old = st.registry.table.slot("probe").current
        handle = old.models["double"].handle
        assert handle is not None
        entered, go = threading.Event(), threading.Event()
        run = handle.infer

        def held(inputs: Sequence[Array], *, deadline: float | None = None) -> list[Array]:
            entered.set()
            go.wait(60)
            return run(inputs, deadline=deadline)

        monkeypatch.setattr(handle, "infer", held)
        slow = asyncio.create_task(st.service.run_adapter(probe()))
        assert await asyncio.to_thread(entered.wait, 60)
        await st.install(kit.build("probe", 2, sections=SLOW))
        assert (await st.service.run_adapter(probe())).body == b"v2:2,4,6,8"
        assert not old.closed  # still draining
        go.set()
        answer = await slow
        assert (answer.body, answer.version) == (b"v1:2,4,6,8", 1)
        assert await _closed_soon(old)


async def _closed_soon(bundle: LoadedBundle) -> bool:
    for _ in range(100):
        if bundle.closed:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_staged_activation_then_promote(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        await st.install(kit.build("probe", 2), percent=50)
        seen = Counter([(await st.service.run_adapter(probe())).version for _ in range(200)])
        assert set(seen) == {1, 2}
        [entry] = st.registry.status()
        assert (entry["version"], entry["staged"]["version"], entry["staged"]["percent"]) == (
            1,
            2,
            50,
        )
        await st.registry.promote("probe")
        seen = Counter([(await st.service.run_adapter(probe())).version for _ in range(20)])
        assert seen == {2: 20}
        with pytest.raises(NotFound, match="no staged version"):
            await st.registry.promote("probe")


async def test_remove_survives_restart(tmp_path: Path, kit: BundleKit) -> None:
    state = tmp_path / "state"
    drop = tmp_path / "drop"
    drop.mkdir()
    dropped = kit.build("probe", 1, out_dir=drop)
    original = dropped.read_bytes()
    async with open_stack(tmp_path, kit, start=(dropped,), state_dir=state) as st:
        removed = await st.registry.remove("probe")
        assert not dropped.exists()  # it would come back from the directory otherwise
        assert removed.version == 1
        with pytest.raises(NotFound):
            await st.service.run_adapter(probe())
        with pytest.raises(NotFound):
            await st.registry.remove("probe")
    async with open_stack(tmp_path, kit, state_dir=state) as st:
        assert st.service.list_models() == []
        (tmp_path / "again.wgb").write_bytes(original)
        await st.install(tmp_path / "again.wgb")  # the same bundle may come back on purpose
        assert st.service.adapter_names() == ["probe"]


async def test_watcher_installs_settled_files_once(tmp_path: Path, kit: BundleKit) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    async with open_stack(tmp_path, kit) as st:
        watcher = DirWatcher(drop, lambda p: st.registry.install(p, source=f"file {p.name}"))
        kit.build("probe", 1, out_dir=drop)
        (drop / "junk.wgb").write_bytes(b"not a bundle")
        await watcher.poll_once()  # first sighting: wait for the files to settle
        assert st.service.adapter_names() == []
        await watcher.poll_once()
        assert st.service.adapter_names() == ["probe"]
        failures = st.registry.failures()
        assert [f.source for f in failures] == ["file junk.wgb"]
        await watcher.poll_once()  # unchanged files are not tried again
        assert len(st.registry.events) == 2
        kit.build("probe", 2, out_dir=drop)
        await watcher.poll_once()
        await watcher.poll_once()
        assert (await st.service.run_adapter(probe())).version == 2


async def test_revoked_key_unloads_on_trust_reload(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        revoked = kit.trust.with_revoked(key_id=key_id_of(kit.key.verify_key))
        assert await st.registry.apply_trust(revoked) == ["probe"]
        assert st.service.adapter_names() == []
        assert "no longer accepts" in st.registry.failures()[0].message


async def test_refused_files_are_retried_when_the_trust_changes(
    tmp_path: Path, kit: BundleKit
) -> None:
    drop, stranger = tmp_path / "drop", BundleKit(tmp_path / "stranger")
    drop.mkdir()
    async with open_stack(tmp_path, kit) as st:
        watcher = DirWatcher(drop, lambda p: st.registry.install(p, source=f"file {p.name}"))
        stranger.build("probe", 1, out_dir=drop)
        await watcher.poll_once()
        await watcher.poll_once()
        assert watcher.refused == [drop / "probe-1.wgb"]
        await st.registry.apply_trust(kit.trust.with_signer(stranger.key.verify_key, ["*"], {}))
        await watcher.rescan()  # a plain rescan only looks at changed files
        assert st.service.adapter_names() == []
        await watcher.rescan(retry_refused=True)  # what SIGHUP and a trust-file change do
        assert st.service.adapter_names() == ["probe"]
        assert watcher.refused == []


async def test_trust_file_change_is_reported_once_it_settled(tmp_path: Path) -> None:
    trust, calls = tmp_path / "trust.json", []

    async def changed() -> None:
        calls.append(trust.read_bytes())

    async def install(path: Path) -> None:
        raise AssertionError(path)  # no bundle directory here

    watcher = DirWatcher(tmp_path / "none", install, trust_file=trust, on_trust_change=changed)
    await watcher.poll_once()
    assert calls == []  # no file at start, none now: nothing changed
    trust.write_bytes(b"{}")
    await watcher.poll_once()  # first sighting: may still be written
    assert calls == []
    await watcher.poll_once()
    await watcher.poll_once()
    assert calls == [b"{}"]
    watcher.trust_seen()  # SIGHUP reloaded it already
    trust.write_bytes(b"{ }")
    watcher.trust_seen()
    await watcher.poll_once()
    await watcher.poll_once()
    assert calls == [b"{}"]


async def test_older_files_at_start_are_one_line_not_a_warning_each(
    tmp_path: Path, kit: BundleKit, caplog: pytest.LogCaptureFixture
) -> None:
    state, drop = tmp_path / "state", tmp_path / "drop"
    drop.mkdir()
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 3),), state_dir=state):
        pass
    old = [kit.build("probe", v, out_dir=drop) for v in (1, 2)]
    caplog.set_level("INFO", logger="wasmgate.registry")
    async with open_stack(tmp_path, kit, start=tuple(old), state_dir=state) as st:
        assert (await st.service.run_adapter(probe())).version == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("skipped 2 bundle files older than the installed versions")
    assert "probe-1.wgb" in warnings[0]
    assert "wasmgate doctor" in warnings[0]
    infos = [r.getMessage() for r in caplog.records]
    assert "loading bundle 3/3: probe-2.wgb" in " ".join(infos)  # progress with counts
    assert any(
        m.startswith("start-up bundles loaded: 1 serving, 0 refused, 2 older") for m in infos
    )

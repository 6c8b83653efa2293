"""The daemon's puller against a real registry: digests, caps, the cache, retries."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from tests.runtime.fleet.ocikit import LOOPBACK, flip_byte, pushed_bundle, raw_manifest
from wasmgate.runtime.fleet.pull import BundlePuller
from wasmgate.runtime.oci.ocitypes import ArtifactRefused, Reference, RegistryUnavailable
from wasmgate.runtime.ops.config import PathSettings, RegistrySettings, Settings
from wasmgate.signing import BundleStore
from wasmgate.signing.errors import RollbackError, SignatureError
from wasmgate.typed import replace


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> BundleKit:
    return BundleKit(tmp_path_factory.mktemp("kit"))


class Sleeps:
    """Records backoff waits instead of waiting; ``then`` runs at the n-th wait."""

    def __init__(self, then: dict[int, object] | None = None) -> None:
        self.waits: list[float] = []
        self._then = then or {}

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        action = self._then.get(len(self.waits))
        if callable(action):
            action()


def puller(tmp_path: Path, sleep: Sleeps | None = None, **settings: object) -> BundlePuller:
    conf = replace(LOOPBACK, **settings)
    return BundlePuller(conf, tmp_path / "pulled", sleep=sleep or Sleeps())


def cache_files(p: BundlePuller) -> list[str]:
    return sorted(f.name for f in p.cache.root.rglob("*") if f.is_file())


async def test_pull_by_digest_installs_through_the_signed_path(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    bundle, ref = pushed_bundle(registry, kit, version=2)
    got = await puller(tmp_path).pull(ref)
    assert got.path.read_bytes() == bundle.read_bytes()
    assert (got.ref, got.downloaded, got.size) == (ref, True, bundle.stat().st_size)
    assert got.annotations["dev.wasmgate.bundle.version"] == "2"
    store = BundleStore(tmp_path / "state", kit.trust, max_bundle_bytes=1 << 30)
    assert store.install(got.path).manifest.version == 2
    # the registry is only transport: anti-rollback still decides ...
    _, older = pushed_bundle(registry, kit, version=1)
    with pytest.raises(RollbackError):
        store.install((await puller(tmp_path).pull(older)).path)
    # ... and so does the signature: a bundle by an untrusted key travels, but never installs
    stranger = BundleKit(tmp_path / "stranger")
    _, foreign = pushed_bundle(registry, stranger, version=3)
    with pytest.raises(SignatureError):
        store.install((await puller(tmp_path).pull(foreign)).path)
    assert [b.manifest.version for b in store.installed()] == [2]


async def test_a_digest_held_is_never_downloaded_twice(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    bundle, ref = pushed_bundle(registry, kit)
    p = puller(tmp_path)
    first, *others = await asyncio.gather(p.pull(ref), p.pull(ref), p.pull(ref))
    assert first.downloaded
    assert not any(o.downloaded for o in others)
    layer = first.layer_digest
    assert registry.blob_gets().count(layer) == 1
    assert (p.stats.downloads, p.stats.bytes_downloaded) == (1, bundle.stat().st_size)
    # across a restart, with the registry gone: served from the cache, not one request
    registry.stop()
    again = await puller(tmp_path).pull(ref)
    assert (again.downloaded, again.path.read_bytes()) == (False, bundle.read_bytes())
    # a cached layer damaged on disk counts as absent: fetched again, then intact
    registry.start()
    flip_byte(again.path)
    fixed = await puller(tmp_path).pull(ref)
    assert fixed.downloaded
    assert fixed.path.read_bytes() == bundle.read_bytes()
    assert registry.blob_gets().count(layer) == 2


async def test_oversize_is_refused_before_any_download(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    bundle, ref = pushed_bundle(registry, kit)
    cap = bundle.stat().st_size - 1
    p = puller(tmp_path, max_bundle_bytes=cap)
    with pytest.raises(ArtifactRefused, match=f"cap is {cap}"):
        await p.pull(ref)
    assert registry.blob_gets() == []
    assert (p.stats.bytes_downloaded, p.stats.retries, cache_files(p)) == (0, 0, [])


@pytest.mark.parametrize("damage", ["flip", "append"])
async def test_a_layer_altered_in_storage_is_refused_and_nothing_kept(
    registry: Registry, kit: BundleKit, tmp_path: Path, damage: str
) -> None:
    _, ref = pushed_bundle(registry, kit)
    p = puller(tmp_path)
    layer = registry.blob_path(_layer_of(registry, ref))
    original = layer.read_bytes()
    if damage == "flip":
        flip_byte(layer, offset=len(original) // 2)
    else:
        layer.write_bytes(original + b"\0" * 64)
    with pytest.raises(ArtifactRefused):
        await p.pull(ref)
    assert (cache_files(p), p.stats.retries) == ([], 0)  # refused, not retried
    layer.write_bytes(original)  # repaired in the registry: the next pull succeeds
    assert (await p.pull(ref)).downloaded


async def test_registry_down_retries_with_backoff_then_unavailable(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    _, ref = pushed_bundle(registry, kit)
    registry.stop()
    sleeps = Sleeps()
    p = puller(tmp_path, sleeps, retries=4, backoff_s=1.0, backoff_max_s=3.0)
    with pytest.raises(RegistryUnavailable, match="gave up after 5 tries") as failed:
        await p.pull(ref)
    assert failed.value.retryable
    caps = [1.0, 2.0, 3.0, 3.0]  # doubling, capped at backoff_max_s; jitter takes up to half
    assert len(sleeps.waits) == len(caps) == p.stats.retries
    assert all(c / 2 <= w <= c for w, c in zip(sleeps.waits, caps, strict=True)), sleeps.waits
    # back during a backoff wait: the same pull converges
    back = Sleeps(then={2: registry.start})
    got = await puller(tmp_path, back, retries=4).pull(ref)
    assert (got.downloaded, len(back.waits)) == (True, 2)


async def test_no_retry_starts_past_the_deadline(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    _, ref = pushed_bundle(registry, kit)
    registry.stop()
    sleeps = Sleeps()
    p = puller(tmp_path, sleeps, retries=10, backoff_s=30.0)
    with pytest.raises(RegistryUnavailable, match="deadline"):
        await p.pull(ref, deadline=time.monotonic() + 5.0)
    assert sleeps.waits == []
    with pytest.raises(RegistryUnavailable, match="deadline"):
        await p.pull(ref, deadline=time.monotonic() - 1.0)


async def test_a_pull_waiting_to_retry_can_be_cancelled(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    _, ref = pushed_bundle(registry, kit)
    registry.stop()
    p = BundlePuller(replace(LOOPBACK, retries=50), tmp_path / "c")
    task = asyncio.create_task(p.pull(ref))
    for _ in range(500):  # bounded: until the first failure put it into its backoff wait
        if p.stats.retries:
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    registry.start()
    async with asyncio.timeout(60):
        assert (await p.pull(ref)).downloaded  # nothing left locked


async def test_refs_must_be_pinned_by_digest(registry: Registry, tmp_path: Path) -> None:
    p = puller(tmp_path)
    for bad in (f"{registry.address}/fleet/probe:v1", "probe", f"{registry.address}/a@sha256:0"):
        with pytest.raises(ArtifactRefused):
            await p.pull(bad)
    assert registry.blob_gets() == []


async def test_prune_keeps_only_the_wanted(
    registry: Registry, kit: BundleKit, tmp_path: Path
) -> None:
    _, one = pushed_bundle(registry, kit, version=1)
    _, two = pushed_bundle(registry, kit, version=2)
    p = puller(tmp_path)
    kept, dropped = await p.pull(one), await p.pull(two)
    removed = p.prune([one])
    assert removed == sorted([dropped.digest, dropped.layer_digest])
    assert p.held(Reference.parse(two)) is None
    assert (await p.pull(one)).downloaded is False
    assert kept.path.is_file()


def _layer_of(registry: Registry, ref: str) -> str:
    digest = ref.split("@", 1)[1]
    layer: str = raw_manifest(registry, "fleet/probe", digest)["layers"][0]["digest"]
    return layer


def test_the_daemon_keeps_pulls_in_its_state_dir(tmp_path: Path) -> None:
    settings = Settings(paths=PathSettings(data_dir=tmp_path), registry=RegistrySettings(retries=2))
    p = BundlePuller.for_daemon(settings)
    assert p.cache.root == tmp_path / "state" / "pulled"
    assert oct(p.cache.root.stat().st_mode & 0o777) == "0o700"

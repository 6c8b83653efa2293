"""The OCI sink on a real store and a real registry (docker-registry): what an artifact
holds, batching, and delivery through outages and a misbehaving registry (every sample
arrives, in order, none twice, and stays on the gateway until the registry stored it)."""

from __future__ import annotations

import base64
import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.net import serving
from tests.fixtures.registry import Registry
from tests.fixtures.waits import until_async
from tests.runtime.field.ocisamples import FlakyRegistry, Pulled, pulled
from wasmgate.runtime.field.samples import SAMPLE_FIELDS, SAMPLES, Origin, StoredSamples
from wasmgate.runtime.field.samples_oci import ARTIFACT_TYPE, IDS, OciSamples
from wasmgate.runtime.field.store import Store, StreamLimits
from wasmgate.runtime.ops.config import RegistrySettings, SamplesSettings
from wasmgate.runtime.ops.tasks import background
from wasmgate.runtime.served.api import AdapterAnswer, AdapterRequest
from wasmgate.signing.manifest import SamplesGrant
from wasmgate.typed import replace

REPO = "lab/samples"
FAST = RegistrySettings(insecure=True, backoff_s=0.05, backoff_max_s=0.2, timeout_s=1.0)
GRANT = SamplesGrant(keep_payload=True, rate=1.0, max_per_hour=10_000, max_bytes=16 << 20)


class Kept:
    """Hard examples kept the daemon's way (`StoredSamples`), one bundle per adapter."""

    def __init__(self, store: Store) -> None:
        self.keeper = StoredSamples(store, SamplesSettings())

    async def keep(self, adapter: str, payload: bytes, version: int = 1) -> None:
        origin = Origin(f"b-{adapter}", version, adapter, GRANT)
        req = AdapterRequest(adapter, payload, "application/octet-stream")
        local = AdapterAnswer(b'{"label": "cat"}', "application/json", "local", version)
        cloud = AdapterAnswer(b'{"label": "dog"}', "application/json", "cloud", version)
        await self.keeper.consider(origin, req, local, cloud)


async def until(check: Callable[[], bool], what: str, limit_s: float = 30) -> None:
    await until_async(check, what, limit_s, every_s=0.05)


@contextlib.asynccontextmanager
async def shipping(
    tmp: Path, address: str, *, batch: int = 16, conf: RegistrySettings = FAST
) -> AsyncIterator[tuple[Store, Kept, OciSamples]]:
    async with Store(tmp / "s.db", {SAMPLES: StreamLimits(64 << 20)}) as store:
        sink = OciSamples(store, f"{address}/{REPO}", conf, "gw 7/ü", batch=batch, rate=1e4)
        with sink:
            async with background(sink.run(), "samples-oci-test"):
                yield store, Kept(store), sink


async def _failing_twice(sink: OciSamples, mode: str) -> None:
    failed = sink.failed
    await until(lambda: sink.failed >= failed + 2, f"retried through {mode}")


def depth(store: Store) -> int:
    return store.stats()[SAMPLES].depth


def payloads(arts: list[Pulled]) -> list[bytes]:
    return [base64.b64decode(d["payload_b64"]) for a in arts for d in a.docs]


async def test_an_artifact_holds_the_samples_and_names_them(
    tmp_path: Path, registry: Registry
) -> None:
    async with shipping(tmp_path, registry.address) as (store, kept, sink):
        await kept.keep("vision", b"F-one")
        await kept.keep("vision", b"F-two")
        await until(lambda: depth(store) == 0, "samples acked")
    arts = pulled(registry.address, REPO)
    assert payloads(arts) == [b"F-one", b"F-two"]
    doc = arts[0].docs[0]
    assert set(doc) == set(SAMPLE_FIELDS)
    assert (doc["bundle"], doc["version"], doc["adapter"], doc["reason"]) == (
        "b-vision", 1, "vision", "disagreement",
    )  # fmt: skip
    assert base64.b64decode(doc["cloud"]["body_b64"]) == b'{"label": "dog"}'
    manifest = arts[0].manifest
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert manifest["layers"][0]["mediaType"] == ARTIFACT_TYPE
    notes = manifest["annotations"]
    ids = [int(i) for a in arts for i in a.manifest["annotations"][IDS].split(",")]
    assert ids == sorted(ids)
    assert len(ids) == 2
    assert notes["dev.wasmgate.samples.adapter"] == "vision"
    assert notes["dev.wasmgate.bundle.name"] == "b-vision"
    assert notes["dev.wasmgate.bundle.version"] == "1"
    assert notes["dev.wasmgate.gateway"] == "gw 7/ü"
    assert notes["dev.wasmgate.samples.first-at"] <= notes["dev.wasmgate.samples.last-at"]
    assert notes["org.opencontainers.image.title"] == f"{arts[0].tag}.jsonl"
    assert arts[0].tag.endswith(f"-gw_7__-{ids[0]}")
    assert sink.status()["shipped"] == 2


async def test_batches_keep_order_and_one_origin_each(tmp_path: Path, registry: Registry) -> None:
    order = [("a", 1), ("a", 1), ("a", 1), ("b", 1), ("a", 1), ("a", 2)]
    async with shipping(tmp_path, registry.address, batch=2) as (store, kept, _):
        for i, (adapter, version) in enumerate(order):
            await kept.keep(adapter, b"F-%d" % i, version)
        await until(lambda: depth(store) == 0, "samples acked")
    arts = pulled(registry.address, REPO)
    # Tags sort by time: reading them in tag order gives the samples in the order kept.
    assert payloads(arts) == [b"F-%d" % i for i in range(len(order))]
    for art in arts:
        assert 1 <= len(art.docs) <= 2
        origins = {(d["adapter"], d["version"]) for d in art.docs}
        assert len(origins) == 1
        (adapter, version) = origins.pop()
        assert art.manifest["annotations"]["dev.wasmgate.samples.adapter"] == adapter
        assert art.manifest["annotations"]["dev.wasmgate.bundle.version"] == str(version)
        assert art.manifest["annotations"]["dev.wasmgate.samples.count"] == str(len(art.docs))


async def test_registry_down_keeps_them_until_it_is_back_none_twice(
    tmp_path: Path, registry: Registry
) -> None:
    async with shipping(tmp_path, registry.address) as (store, kept, sink):
        await kept.keep("vision", b"F-before")
        await until(lambda: depth(store) == 0, "first sample acked")
        registry.stop()
        for i in range(5):
            await kept.keep("vision", b"F-down-%d" % i)
        await until(lambda: sink.failed >= 3, "pushes tried and failed")
        assert depth(store) == 5  # nothing acked while the registry is away
        assert "RegistryUnavailable" in str(sink.status()["last_error"])
        registry.start()
        await until(lambda: depth(store) == 0, "kept samples pushed once it is back")
    assert payloads(pulled(registry.address, REPO)) == [
        b"F-before", *(b"F-down-%d" % i for i in range(5)),
    ]  # fmt: skip


@pytest.fixture
def flaky(registry: Registry) -> Iterator[tuple[FlakyRegistry, str]]:
    """A misbehaving proxy in front of the real registry, and its ``HOST:PORT``."""
    proxy = FlakyRegistry(registry.address)
    with serving(proxy.app()) as url:
        yield proxy, url.removeprefix("http://")


async def test_a_misbehaving_registry_loses_nothing(
    tmp_path: Path, registry: Registry, flaky: tuple[FlakyRegistry, str]
) -> None:
    """500s, garbage with 200, silence, a manifest "stored" with 200 but not: kept; then
    each arrives once."""
    proxy, address = flaky
    conf = replace(FAST, timeout_s=0.3)
    async with shipping(tmp_path, address, conf=conf) as (store, kept, sink):
        for i, mode in enumerate(("500", "garbage", "hang", "unstored")):
            proxy.mode = mode
            await kept.keep("vision", b"F-%s-%d" % (mode.encode(), i))
            await _failing_twice(sink, mode)
            assert depth(store) == i + 1
        proxy.mode = "pass"
        await until(lambda: depth(store) == 0, "pushed once the registry behaves")
    assert payloads(pulled(registry.address, REPO)) == [
        b"F-500-0", b"F-garbage-1", b"F-hang-2", b"F-unstored-3",
    ]  # fmt: skip
    assert set(proxy.seen) == {"500", "garbage", "hang", "unstored", "pass"}


async def test_a_refused_batch_goes_one_sample_at_a_time(
    tmp_path: Path, registry: Registry, flaky: tuple[FlakyRegistry, str]
) -> None:
    proxy, address = flaky
    proxy.mode, proxy.big = "refuse_big", 3000
    async with shipping(tmp_path, address, batch=8) as (store, kept, _):
        for i in range(4):
            await kept.keep("vision", b"F-%d-" % i + b"x" * 1000)
        await until(lambda: depth(store) == 0, "pushed singly")
    arts = pulled(registry.address, REPO)
    assert [p[:4] for p in payloads(arts)] == [b"F-0-", b"F-1-", b"F-2-", b"F-3-"]
    assert max(len(a.docs) for a in arts) <= 2  # 3 samples' layer is over 3000 bytes


async def test_huge_nan_and_foreign_samples_do_not_break_the_sink(
    tmp_path: Path, registry: Registry
) -> None:
    huge = b"F-huge-" + b"\xff" * (5 << 20)  # over the 4 MiB batch cap: alone
    nan = json.dumps({"bundle": "b", "version": 1, "x": math.nan, "s": "a\nb"}, indent=1)
    async with shipping(tmp_path, registry.address) as (store, kept, _):
        await kept.keep("vision", huge)
        await store.append(SAMPLES, nan.encode(), {"adapter": "odd"})
        await store.append(SAMPLES, b"not json at all", {})
        await kept.keep("vision", b"F-after")
        await until(lambda: depth(store) == 0, "every entry pushed")
    arts = pulled(registry.address, REPO)
    assert len(arts) == 4  # four origins: vision, odd, none, vision
    assert base64.b64decode(arts[0].docs[0]["payload_b64"]) == huge
    (odd,) = arts[1].docs
    assert math.isnan(odd["x"])
    assert odd["s"] == "a\nb"  # the multi-line document became one line, intact
    assert arts[2].lines == [b"not json at all"]
    assert base64.b64decode(arts[3].docs[0]["payload_b64"]) == b"F-after"

"""Hard-example capture on a real store: what the manifest allows, tightened by the config;
rate and caps; the disagreement rule; nothing written when keeping is not allowed."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from wasmgate.runtime.field.samples import (
    SAMPLE_FIELDS,
    SAMPLES,
    Origin,
    SamplePolicy,
    StoredSamples,
    disagrees,
)
from wasmgate.runtime.field.samples_read import SamplesUnreadable, read_samples
from wasmgate.runtime.field.store import Store, StreamLimits
from wasmgate.runtime.ops.config import SamplesSettings
from wasmgate.runtime.served.api import AdapterAnswer, AdapterRequest
from wasmgate.signing.manifest import SamplesGrant

ALLOW = SamplesGrant(keep_payload=True, rate=1.0, max_per_hour=5, max_bytes=4096)


def _local(body: bytes = b'{"label": "cat"}') -> AdapterAnswer:
    return AdapterAnswer(body, "application/json", "local", 3, fallback_reason="p=0.41")


def _cloud(body: bytes) -> AdapterAnswer:
    return AdapterAnswer(body, "application/json", "cloud", 3, fallback_reason="p=0.41")


def _origin(grant: SamplesGrant | None = ALLOW) -> Origin:
    return Origin("vision", 3, "vision-mqtt", grant)


def _store(tmp: Path) -> Store:
    return Store(tmp / "store.db", {SAMPLES: StreamLimits(1 << 20)})


@pytest.mark.parametrize(
    ("grant", "conf", "expected"),
    [
        (None, SamplesSettings(), None),
        (SamplesGrant(keep_payload=False), SamplesSettings(), None),
        (ALLOW, SamplesSettings(enabled=False), None),
        (ALLOW, SamplesSettings(), SamplePolicy(1.0, 5, 4096)),
        # The config tightens each field...
        (
            ALLOW,
            SamplesSettings(rate=0.25, max_per_hour=2, max_bytes=100),
            SamplePolicy(0.25, 2, 100),
        ),
        # ...and never loosens one.
        (
            SamplesGrant(keep_payload=True, rate=0.5, max_per_hour=1, max_bytes=10),
            SamplesSettings(rate=1.0, max_per_hour=1000, max_bytes=1 << 20),
            SamplePolicy(0.5, 1, 10),
        ),
        (SamplesGrant(keep_payload=True, rate=0.0), SamplesSettings(rate=1.0), None),
        (ALLOW, SamplesSettings(max_per_hour=0), None),
    ],
)
def test_policy_is_the_manifest_tightened_by_the_config(
    grant: SamplesGrant | None, conf: SamplesSettings, expected: SamplePolicy | None
) -> None:
    assert SamplePolicy.of(grant, conf) == expected


@pytest.mark.parametrize(
    ("local", "cloud", "differ"),
    [
        (b'{"label": "cat", "p": 0.4}', b'{"label": "cat", "p": 0.9}', False),
        (b'{"label": "cat"}', b'{"label": "dog"}', True),
        (b'{"scores": [0.1, 0.5, 0.4]}', b'{"scores": [0.0, 0.9, 0.1]}', False),
        (b'{"scores": [0.1, 0.5, 0.4]}', b'{"scores": [0.6, 0.3, 0.1]}', True),
        (b"[0.1, 0.9]", b"[0.8, 0.2]", True),
        (b'{"rms": 1.0000}', b'{"rms": 1.0005}', False),
        (b'{"rms": 1.0}', b'{"rms": 1.1}', True),
        (b'{"ok": true}', b'{"ok": false}', True),
        (b"none:local", b"none:local", False),
        (b"none:local", b"cloud:local", True),
        (b'{"label": "cat"}', b"not json", True),
        (b'{"a": NaN}', b'{"a": NaN}', True),  # NaN is never the same number
    ],
)
def test_disagreement_rule(local: bytes, cloud: bytes, differ: bool) -> None:
    assert disagrees(local, cloud) is differ


async def test_kept_sample_has_every_field(tmp_path: Path) -> None:
    req = AdapterRequest("vision", b"\x00\xffimage", "image/raw")
    async with _store(tmp_path) as store:
        samples = StoredSamples(store, SamplesSettings())
        await samples.consider(_origin(), req, _local(), _cloud(b'{"label": "dog"}'))
        await samples.consider(_origin(), req, _local(), _local())  # the cloud was not asked
    got = read_samples(tmp_path / "store.db")
    assert [s.doc["reason"] for s in got] == ["disagreement", "low_confidence"]
    doc = got[0].doc
    assert set(doc) == set(SAMPLE_FIELDS)
    assert base64.b64decode(doc["payload_b64"]) == b"\x00\xffimage"
    assert (doc["bundle"], doc["version"], doc["adapter"], doc["mqtt"]) == (
        "vision", 3, "vision", "vision-mqtt",
    )  # fmt: skip
    assert base64.b64decode(doc["local"]["body_b64"]) == b'{"label": "cat"}'
    assert base64.b64decode(doc["cloud"]["body_b64"]) == b'{"label": "dog"}'
    assert doc["fallback_reason"] == "p=0.41"
    assert doc["content_type"] == "image/raw"
    assert got[1].doc["cloud"] is None


async def test_forbidden_payload_is_never_written(tmp_path: Path) -> None:
    marker = b"SECRET-PAYLOAD-7f3a"
    req = AdapterRequest("vision", marker)
    async with _store(tmp_path) as store:
        samples = StoredSamples(store, SamplesSettings())
        for grant in (None, SamplesGrant(keep_payload=False, rate=1.0)):
            await samples.consider(_origin(grant), req, _local(), _cloud(b"x"))
        # The config cannot loosen a manifest that keeps nothing.
        loose = StoredSamples(store, SamplesSettings(rate=1.0, max_per_hour=10**6))
        await loose.consider(
            _origin(SamplesGrant(keep_payload=True, rate=0.0)), req, _local(), _local()
        )
        assert store.stats()[SAMPLES].depth == 0
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))
    assert on_disk  # the store did write its files
    assert marker not in on_disk
    assert base64.b64encode(marker) not in on_disk


async def test_rate_hourly_cap_and_size_are_respected(tmp_path: Path) -> None:
    now = [1000.0]
    draws = iter([0.9, 0.1, 0.1, 0.1, 0.1, 0.1])
    grant = SamplesGrant(keep_payload=True, rate=0.5, max_per_hour=2, max_bytes=2048)
    async with _store(tmp_path) as store:
        samples = StoredSamples(
            store, SamplesSettings(), draw=lambda: next(draws), clock=lambda: now[0]
        )
        req = AdapterRequest("vision", b"x")
        await samples.consider(_origin(grant), req, _local(), _local())  # drawn out by the rate
        big = AdapterRequest("vision", b"y" * 4096)
        await samples.consider(_origin(grant), big, _local(), _local())  # over max_bytes
        for _ in range(3):  # two kept, one over the hourly cap
            await samples.consider(_origin(grant), req, _local(), _local())
        now[0] += 3601  # a new hour
        await samples.consider(_origin(grant), req, _local(), _local())
        assert samples.status() == {
            "kept": 3, "skipped": {"rate": 1, "hourly": 1, "size": 1, "store": 0},
        }  # fmt: skip
    assert len(read_samples(tmp_path / "store.db")) == 3


async def test_caps_are_per_bundle(tmp_path: Path) -> None:
    one = SamplesGrant(keep_payload=True, max_per_hour=1)
    async with _store(tmp_path) as store:
        samples = StoredSamples(store, SamplesSettings())
        for name in ("a", "b", "a"):
            origin = Origin(name, 1, name, one)
            await samples.consider(origin, AdapterRequest(name, b"p"), _local(), _local())
    assert [s.doc["bundle"] for s in read_samples(tmp_path / "store.db")] == ["a", "b"]


def test_reading_a_missing_or_foreign_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SamplesUnreadable, match="does not exist"):
        read_samples(tmp_path / "nope.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(SamplesUnreadable, match=r"junk\.db"):
        read_samples(junk)

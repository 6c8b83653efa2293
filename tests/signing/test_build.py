"""Builder: bundle.toml to a signed .wgb; hashes, sizes, basenames, defaults, refusals."""

from __future__ import annotations

import hashlib
import io
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.signing.conftest import MAX_BUNDLE, Kit
from wasmgate.signing import (
    ManifestError,
    TrustStore,
    UnsafeMemberError,
    build_bundle,
    parse_duration,
    verify_bundle,
)


def _toml(kit: Kit, text: str) -> None:
    (kit.src / "bundle.toml").write_text(text)


def test_archive_layout_and_manifest(kit: Kit, trust: TrustStore) -> None:
    data = kit.build(3)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        names = tf.getnames()
        assert all(m.mode == 0o644 and m.mtime == 0 and m.isreg() for m in tf.getmembers())
    assert names == [
        "manifest.json", "manifest.sig", "adapter.wasm", "digits-fp32.onnx", "digits-int8.onnx",
    ]  # fmt: skip
    m = verify_bundle(data, trust, max_bundle_bytes=MAX_BUNDLE).manifest
    fp32 = (kit.root / "src" / "models" / "digits-fp32.onnx").read_bytes()
    assert m.files["digits-fp32.onnx"].sha256 == hashlib.sha256(fp32).hexdigest()
    assert m.files["digits-fp32.onnx"].size == len(fp32)
    assert m.expires - m.issued_at == timedelta(days=90)


def test_build_is_deterministic(kit: Kit) -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert kit.build(3, now=now) == kit.build(3, now=now)


def test_minimal_bundle_gets_defaults(kit: Kit, trust: TrustStore, tmp_path: Path) -> None:
    _toml(kit, 'name = "digits-min"\nversion = 2\n[adapter]\nfile = "adapter.wasm"\n')
    out = tmp_path / "m.wgb"
    m = build_bundle(kit.src, kit.key, out)
    assert (m.routes.http, m.routes.mqtt) == ("digits-min", "digits-min")
    assert m.limits.memory_mb == 64
    assert not m.fallback.allowed
    assert m.models == []
    assert verify_bundle(out, trust, max_bundle_bytes=MAX_BUNDLE).manifest == m


def test_extra_files(kit: Kit, tmp_path: Path) -> None:
    (kit.src / "samples").mkdir()
    (kit.src / "samples" / "one.bin").write_bytes(b"\x01")
    _toml(kit, 'name = "d"\nversion = 1\nextra_files = ["samples/one.bin"]\n')
    m = build_bundle(kit.src, kit.key, tmp_path / "x.wgb")
    assert list(m.files) == ["one.bin"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('name = "d"\n', "no integer version"),
        ('name = "d"\nversion = 1\ncolour = "red"\n', "colour"),
        ('name = "../d"\nversion = 1\n', "name"),
        ('name = "d"\nversion = 1\n[adapter]\nfile = "missing.wasm"\n', "not found"),
        ('name = "d"\nversion = 1\n[limits]\nmemory_mb = "32"\n', "memory_mb"),
        ('name = "d"\nversion = 1\n[fallback]\nallowed = 1\n', "fallback.allowed"),
        ("name = \n", "cannot read bundle.toml"),
    ],
)  # fmt: skip
def test_bundle_toml_errors(kit: Kit, tmp_path: Path, text: str, reason: str) -> None:
    _toml(kit, text)
    with pytest.raises(ManifestError, match=reason):
        build_bundle(kit.src, kit.key, tmp_path / "x.wgb")
    assert not (tmp_path / "x.wgb").exists()


def test_basename_clash_refused(kit: Kit, tmp_path: Path) -> None:
    (kit.src / "a").mkdir()
    (kit.src / "a" / "adapter.wasm").write_bytes(b"other")
    text = 'name = "d"\nversion = 1\nextra_files = ["a/adapter.wasm"]\n'
    _toml(kit, text + '[adapter]\nfile = "adapter.wasm"\n')
    with pytest.raises(ManifestError, match=r"two different files named 'adapter\.wasm'"):
        build_bundle(kit.src, kit.key, tmp_path / "x.wgb")


def test_unsafe_basename_refused(kit: Kit, tmp_path: Path) -> None:
    (kit.src / ".secret").write_bytes(b"x")
    _toml(kit, 'name = "d"\nversion = 1\nextra_files = [".secret"]\n')
    with pytest.raises(UnsafeMemberError):
        build_bundle(kit.src, kit.key, tmp_path / "x.wgb")


def test_version_flag_overrides_toml(kit: Kit, tmp_path: Path) -> None:
    assert build_bundle(kit.src, kit.key, tmp_path / "x.wgb", version=42).version == 42


@pytest.mark.parametrize(
    ("text", "seconds"), [("90d", 90 * 86400), ("12h", 43200), ("2w", 1209600)]
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "0d", "10", "5y", "-1d"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)

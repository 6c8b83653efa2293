"""`wasmgate bundle push|pull` against a real registry with real signed bundles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import write_config
from tests.fixtures.net import free_port
from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from tests.runtime.fleet.ocikit import flip_byte, put_manifest, raw_manifest
from wasmgate.runtime.cli import main
from wasmgate.runtime.oci.ocitypes import (
    ARTIFACT_TYPE,
    BUNDLE_NAME,
    BUNDLE_VERSION,
    LAYER_MEDIA_TYPE,
)
from wasmgate.signing import verify_bundle


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> BundleKit:
    return BundleKit(tmp_path_factory.mktemp("kit"))


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def push_json(capsys: pytest.CaptureFixture[str], bundle: Path, ref: str) -> dict[str, Any]:
    code, out, err = cli(capsys, "bundle", "push", bundle, ref, "--insecure", "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_push_then_pull_by_tag_and_by_digest(
    registry: Registry, kit: BundleKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = kit.build("probe", 3)
    pushed = push_json(capsys, bundle, f"{registry.address}/fleet/probe:v3")
    digest = pushed["digest"]
    assert pushed["ref"] == f"{registry.address}/fleet/probe@{digest}"
    manifest = raw_manifest(registry, "fleet/probe", digest)
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == [LAYER_MEDIA_TYPE]
    notes = manifest["annotations"]
    assert (notes[BUNDLE_NAME], notes[BUNDLE_VERSION]) == ("probe", "3")
    assert notes["org.opencontainers.image.title"] == bundle.name
    for ref in (f"{registry.address}/fleet/probe:v3", pushed["ref"]):
        out = tmp_path / "pulled.wgb"
        code, text, err = cli(capsys, "bundle", "pull", ref, "--out", out, "--insecure")
        assert code == 0, err
        assert f"digest {digest}\nref {pushed['ref']}" in text
        assert out.read_bytes() == bundle.read_bytes()
        out.unlink()
    # the transport changed nothing the signature covers
    pulled = tmp_path / "again.wgb"
    assert cli(capsys, "bundle", "pull", pushed["ref"], "--out", pulled, "--insecure")[0] == 0
    assert verify_bundle(pulled, kit.trust, max_bundle_bytes=1 << 30).manifest.version == 3


def test_pull_refuses_a_layer_altered_in_storage(
    registry: Registry, kit: BundleKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pushed = push_json(capsys, kit.build("probe", 1), f"{registry.address}/fleet/probe:v1")
    flip_byte(registry.blob_path(pushed["layer_digest"]))
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "keep.wgb"
    out.write_bytes(b"previous")
    code, _, err = cli(capsys, "bundle", "pull", pushed["ref"], "--out", out, "--insecure")
    assert code == 1
    assert f"manifest says {pushed['size']} bytes {pushed['layer_digest']}" in err
    assert out.read_bytes() == b"previous"  # --out untouched, no partial file left
    assert [p.name for p in out.parent.iterdir()] == ["keep.wgb"]


def test_pull_by_digest_refuses_a_manifest_altered_in_storage(
    registry: Registry, kit: BundleKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pushed = push_json(capsys, kit.build("probe", 1), f"{registry.address}/fleet/probe:v1")
    stored = registry.blob_path(pushed["digest"])
    # still valid JSON, still this bundle's layer: only the digest can tell
    stored.write_bytes(stored.read_bytes().replace(b'"probe"', b'"probf"'))
    out = tmp_path / "x.wgb"
    code, _, err = cli(capsys, "bundle", "pull", pushed["ref"], "--out", out, "--insecure")
    assert code == 1
    assert "the manifest served hashes to sha256:" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"artifactType": "application/vnd.cncf.helm.chart"}, "not a wasmgate bundle"),
        ({"layer": "application/vnd.oci.image.layer.v1.tar"}, "layer media type"),
        ({"layers": 2}, "not a wasmgate bundle"),
    ],
)
def test_pull_refuses_other_artifacts(
    registry: Registry,
    kit: BundleKit,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    change: dict[str, Any],
    reason: str,
) -> None:
    pushed = push_json(capsys, kit.build("probe", 1), f"{registry.address}/fleet/probe:v1")
    manifest = raw_manifest(registry, "fleet/probe", pushed["digest"])
    if "artifactType" in change:
        manifest["artifactType"] = change["artifactType"]
    if "layer" in change:
        manifest["layers"][0]["mediaType"] = change["layer"]
    if "layers" in change:
        manifest["layers"] = manifest["layers"] * change["layers"]
    put_manifest(registry, "fleet/probe", "other", manifest)
    out = tmp_path / "x.wgb"
    ref = f"{registry.address}/fleet/probe:other"
    code, _, err = cli(capsys, "bundle", "pull", ref, "--out", out, "--insecure")
    assert code == 1
    assert reason in err
    assert not out.exists()
    assert pushed["layer_digest"] not in registry.blob_gets()  # refused before the layer


def test_pull_checks_the_size_cap_before_downloading(
    registry: Registry, kit: BundleKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pushed = push_json(capsys, kit.build("probe", 1), f"{registry.address}/fleet/probe:v1")
    cap = pushed["size"] - 1
    config = write_config(tmp_path / "c.toml", {"registry": {"max_bundle_bytes": cap}})
    out = tmp_path / "x.wgb"
    argv = ("bundle", "pull", pushed["ref"], "--out", out, "--insecure", "--config", config)
    code, _, err = cli(capsys, *argv)
    assert code == 1
    assert f"layer is {pushed['size']} bytes, cap is {cap}" in err
    assert registry.blob_gets() == []  # not one blob was requested


def test_usage_errors_and_failures_have_their_exit_codes(
    registry: Registry, kit: BundleKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = kit.build("probe", 1)
    out = tmp_path / "x.wgb"
    usage = [
        ("bundle", "pull", "no-host-or-tag", "--out", out),
        ("bundle", "pull", f"{registry.address}/UPPER:v1", "--out", out),
        ("bundle", "pull", f"{registry.address}/fleet/probe", "--out", out),
        ("bundle", "push", bundle, f"{registry.address}/fleet/probe@sha256:{'0' * 64}"),
    ]
    for argv in usage:
        code, _, err = cli(capsys, *argv)
        assert code == 2, (argv, err)
    not_a_bundle = tmp_path / "junk.wgb"
    not_a_bundle.write_bytes(b"not a bundle")
    code, _, err = cli(capsys, "bundle", "push", not_a_bundle, f"{registry.address}/x:v1")
    assert (code, "not a bundle" in err) == (1, True)
    missing = f"{registry.address}/fleet/none:v9"
    code, _, err = cli(capsys, "bundle", "pull", missing, "--out", out, "--insecure")
    assert (code, "HTTP 404" in err) == (1, True)
    down = f"127.0.0.1:{free_port()}/fleet/probe:v1"
    code, _, err = cli(capsys, "bundle", "pull", down, "--out", out, "--insecure")
    assert (code, "Connection refused" in err) == (1, True), err
    code, _, err = cli(capsys, "bundle", "push", bundle, down, "--insecure")
    assert (code, "Connection refused" in err) == (1, True), err
    assert not out.exists()

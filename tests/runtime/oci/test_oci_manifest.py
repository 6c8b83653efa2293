"""What a registry may serve as a manifest: only a well-formed wasmgate bundle passes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wasmgate.runtime.oci.ocitypes import (
    ARTIFACT_TYPE,
    LAYER_MEDIA_TYPE,
    ArtifactRefused,
    Reference,
    parse_manifest,
)

LAYER = "sha256:" + "ab" * 32


def manifest(**change: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": ARTIFACT_TYPE,
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": LAYER, "size": 100}],
        "annotations": {"dev.wasmgate.bundle.name": "digits", "odd": 7},
    }
    layer = change.pop("layer", {})
    doc["layers"][0].update(layer)
    doc.update(change)
    return doc


def test_a_bundle_manifest_passes_and_keeps_string_annotations() -> None:
    art = parse_manifest(json.dumps(manifest()).encode(), "sha256:x", "ref", 100)
    assert (art.layer_digest, art.layer_size) == (LAYER, 100)
    assert art.annotations == {"dev.wasmgate.bundle.name": "digits"}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xff\xfe not utf-8",
        b"[" * 200_000 + b"]" * 200_000,  # deeper than the interpreter's stack
        b'{"schemaVersion": 2, "layers": [{"size": 1' + b"0" * 5000 + b"}]}",  # int too long
        json.dumps(manifest(schemaVersion=1)).encode(),
        json.dumps([manifest()]).encode(),
        json.dumps(manifest(artifactType="application/vnd.cncf.helm.chart")).encode(),
        json.dumps(manifest(layers=[])).encode(),
        json.dumps(manifest(layers="x" * 10_000)).encode(),
        json.dumps(
            manifest(layer={"mediaType": "application/vnd.oci.image.layer.v1.tar"})
        ).encode(),
        json.dumps(manifest(layer={"digest": "sha512:" + "0" * 128})).encode(),
        json.dumps(manifest(layer={"digest": LAYER.upper()})).encode(),
        json.dumps(manifest(layer={"digest": ["nested"] * 1000})).encode(),
        json.dumps(manifest(layer={"size": -1})).encode(),
        json.dumps(manifest(layer={"size": True})).encode(),
        json.dumps(manifest(layer={"size": 100.0})).encode(),
        json.dumps(manifest(layer={"size": 101})).encode(),  # over the cap
        json.dumps(manifest(layer={"size": 10**300})).encode(),
        json.dumps(manifest(layer={"size": float("nan")})).encode(),  # Python writes NaN
        json.dumps(manifest(layer={"size": float("inf")})).encode(),
    ],
)
def test_anything_else_is_refused_with_a_short_reason(body: bytes) -> None:
    with pytest.raises(ArtifactRefused) as refused:
        parse_manifest(body, "sha256:x", "ref", 100)
    assert len(str(refused.value)) < 400


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:5000/fleet/digits:v1", Reference("127.0.0.1:5000", "fleet/digits", "v1")),
        ("localhost/a:latest", Reference("localhost", "a", "latest")),
        (
            f"reg.example.com/a/b-c/d_e@{LAYER}",
            Reference("reg.example.com", "a/b-c/d_e", None, LAYER),
        ),
        (f"[::1]:5000/a:t@{LAYER}", Reference("[::1]:5000", "a", "t", LAYER)),
    ],
)
def test_references(text: str, parsed: Reference) -> None:
    assert Reference.parse(text) == parsed
    assert str(parsed.pinned(LAYER)).endswith(f"@{LAYER}")


@pytest.mark.parametrize(
    "text",
    [
        "digits:v1",  # no host: never an implied registry
        "127.0.0.1:5000/fleet/digits",  # neither tag nor digest
        "127.0.0.1:5000/Fleet:v1",
        "127.0.0.1:5000/fleet/../x:v1",
        "127.0.0.1:5000/fleet:-v1",
        f"127.0.0.1:5000/fleet@sha256:{'0' * 63}",
        "127.0.0.1:5000/fleet:v1\n",
        "http://127.0.0.1:5000/fleet:v1",
        "a" * 100_000,
    ],
)
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not HOST|give a :TAG") as bad:
        Reference.parse(text)
    assert len(str(bad.value)) < 400

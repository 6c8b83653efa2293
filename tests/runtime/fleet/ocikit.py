"""Shared steps of the OCI tests: push a real signed bundle, read or damage what is stored."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import BUNDLE_NAME, BUNDLE_VERSION, Artifact, Reference
from wasmgate.runtime.ops.config import RegistrySettings

LOOPBACK = RegistrySettings(insecure=True)


def push(
    reg: Registry, bundle: Path, where: str, settings: RegistrySettings = LOOPBACK
) -> Artifact:
    """Push ``bundle`` to ``<registry>/<where>`` (``repo:tag``) the way the CLI does."""
    client = OciClient(reg.address, settings)
    try:
        name, version = bundle.stem.rsplit("-", 1)
        notes = {BUNDLE_NAME: name, BUNDLE_VERSION: version}
        return client.push(bundle, Reference.parse(f"{reg.address}/{where}"), notes)
    finally:
        client.close()


def pushed_bundle(reg: Registry, kit: BundleKit, version: int = 1) -> tuple[Path, str]:
    """A signed ``probe`` bundle pushed as ``fleet/probe:v<version>``; (file, pinned ref)."""
    bundle = kit.build("probe", version)
    art = push(reg, bundle, f"fleet/probe:v{version}")
    return bundle, f"{reg.address}/fleet/probe@{art.digest}"


def flip_byte(path: Path, offset: int = -1) -> None:
    """Alter one byte in place (same size: only a digest check can notice)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def raw_manifest(reg: Registry, repo: str, reference: str) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://{reg.address}/v2/{repo}/manifests/{reference}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def put_manifest(reg: Registry, repo: str, tag: str, manifest: dict[str, Any]) -> None:
    """Store a hand-made manifest (its blobs must already be in ``repo``)."""
    req = urllib.request.Request(
        f"http://{reg.address}/v2/{repo}/manifests/{tag}",
        data=json.dumps(manifest).encode(),
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        method="PUT",
    )
    with urllib.request.urlopen(req, timeout=10):
        pass

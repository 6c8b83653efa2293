"""Fixtures for the signing tests: real Ed25519 keys, real bundle files, a real store."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest

from wasmgate.signing import (
    BUNDLE_PAYLOAD_TYPE,
    BundleStore,
    Envelope,
    SigningError,
    TrustStore,
    build_bundle,
    sign,
    write_archive,
)

BUNDLE_TOML = """
name = "digits"
version = 1
description = "8x8 digits"
min_daemon_version = "0.1.0"

[adapter]
file = "adapter.wasm"
mode = "fresh"

[[models]]
name = "digits"
format = "onnx"
variants = { fp32 = "../models/digits-fp32.onnx", int8 = "../models/digits-int8.onnx" }
inputs = [{ name = "input", datatype = "FP32", shape = [-1, 64] }]
outputs = [{ name = "probs", datatype = "FP32", shape = [-1, 10] }]
batching = { max_batch_size = 8, max_queue_delay_us = 500 }

[routes]
http = "digits"
mqtt = "digits"

[limits]
memory_mb = 32
deadline_ms = 1000

[fallback]
allowed = true
on_adapter_request = true

[params]
confidence_threshold = 0.6
label = "digit"

[selftest]
payload_b64 = "AAAA"
"""

MAX_BUNDLE = 64 * 1024 * 1024


@dataclass
class Kit:
    """Builds real bundles (and hand-crafted hostile archives) in a temp directory."""

    root: Path
    key: nacl.signing.SigningKey
    src: Path = field(init=False)

    def __post_init__(self) -> None:
        self.src = self.root / "src" / "digits"
        models = self.root / "src" / "models"
        self.src.mkdir(parents=True)
        models.mkdir()
        (self.src / "adapter.wasm").write_bytes(b"\0asm\x01\0\0\0" + os.urandom(700))
        (models / "digits-fp32.onnx").write_bytes(os.urandom(5000))
        (models / "digits-int8.onnx").write_bytes(os.urandom(1300))
        (self.src / "bundle.toml").write_text(BUNDLE_TOML)

    def build(
        self,
        version: int = 6,
        *,
        key: nacl.signing.SigningKey | None = None,
        name: str | None = None,
        description: str | None = None,
        now: datetime | None = None,
        expires_in: timedelta = timedelta(days=90),
    ) -> bytes:
        """Build a bundle with the builder; returns the .wgb bytes."""
        toml = BUNDLE_TOML
        if name is not None:
            toml = toml.replace('name = "digits"\nversion', f'name = "{name}"\nversion')
        if description is not None:
            toml = toml.replace('"8x8 digits"', json.dumps(description))
        (self.src / "bundle.toml").write_text(toml)
        out = self.root / f"b-{version}-{os.urandom(4).hex()}.wgb"
        build_bundle(
            self.src, key or self.key, out, version=version, expires_in=expires_in, now=now
        )
        return out.read_bytes()

    def members(self, data: bytes) -> list[tuple[str, bytes]]:
        """The (name, data) members of an archive, in order."""
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            out = []
            for m in tf.getmembers():
                f = tf.extractfile(m)
                out.append((m.name, f.read() if f else b""))
            return out

    def manifest(self, data: bytes) -> dict[str, object]:
        """The manifest of an archive as a dict."""
        obj = json.loads(self.members(data)[0][1])
        assert isinstance(obj, dict)
        return obj

    def signed_head(
        self, manifest: dict[str, object], key: nacl.signing.SigningKey | None = None
    ) -> list[tuple[str, bytes]]:
        """manifest.json + manifest.sig members for ``manifest`` signed by ``key``."""
        body = json.dumps(manifest, indent=2).encode()
        sig = sign(key or self.key, BUNDLE_PAYLOAD_TYPE, body)
        env = Envelope(payload_type=BUNDLE_PAYLOAD_TYPE, signatures=[sig]).to_json()
        return [("manifest.json", body), ("manifest.sig", env)]

    def archive(self, members: list[tuple[str, bytes]]) -> bytes:
        """A well-formed archive of plain members."""
        buf = io.BytesIO()
        write_archive(buf, [(n, d) for n, d in members])
        return buf.getvalue()

    def raw_tar(self, members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
        """An archive with arbitrary tar headers (links, devices, odd names)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            for info, data in members:
                info.size = len(data) if info.isreg() else 0
                tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
        return buf.getvalue()


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path, nacl.signing.SigningKey.generate())


@pytest.fixture
def trust(kit: Kit) -> TrustStore:
    return TrustStore.empty().with_signer(kit.key.verify_key, ["digits*"], {"memory_mb": 128})


@pytest.fixture
def store(kit: Kit, trust: TrustStore, tmp_path: Path) -> BundleStore:
    """A store with version 5 of ``digits`` installed."""
    s = BundleStore(tmp_path / "state", trust, max_bundle_bytes=MAX_BUNDLE)
    s.install(kit.build(5))
    return s


Snapshot = tuple[list[tuple[str, int, str]], dict[str, int]]


def snapshot(store: BundleStore) -> Snapshot:
    installed = [(b.manifest.name, b.manifest.version, b.digest) for b in store.installed()]
    return installed, store.floors()


@pytest.fixture
def refused(store: BundleStore) -> Callable[[bytes, type[SigningError]], SigningError]:
    """Install ``data``; assert the exact error type and that nothing changed (also on disk)."""

    def check(data: bytes, exc: type[SigningError]) -> SigningError:
        before = snapshot(store)
        with pytest.raises(SigningError) as info:
            store.install(data)
        assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
        assert snapshot(store) == before
        reopened = BundleStore(store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE)
        assert snapshot(reopened) == before
        assert list((store.state_dir / "tmp").iterdir()) == []
        return info.value

    return check


def now_utc() -> datetime:
    return datetime.now(UTC)


DYING_REPLACE = """
import os, pathlib
real_replace = pathlib.Path.replace

def dying_replace(self, target):
    # ``point`` (set by the child script) names the rename the process dies at
    target = pathlib.Path(target)
    if point == "blob" and target.parent.name == "blobs":
        os._exit(9)
    if point == "record" and target.parent.name in ("records", "staged"):
        os._exit(9)
    if point == "state-rename" and target.name == "state.json":
        os._exit(9)
    result = real_replace(self, target)
    if point == "after-state" and target.name == "state.json":
        os._exit(9)
    return result

pathlib.Path.replace = dying_replace
"""
"""Child-process prelude: ``os._exit(9)`` at the rename named by the variable ``point``."""


def kill_child(script: str, store: BundleStore, bundle: Path, *args: str) -> None:
    """Run ``script`` (which includes `DYING_REPLACE`) on ``store`` and ``bundle`` in a child
    process: argv = state dir, trust file, bundle, ``args``; assert it died at its point."""
    trust_file = bundle.with_name("trust.json")
    store.trust.save(trust_file)
    argv = [str(store.state_dir), str(trust_file), str(bundle), *args]
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *argv], capture_output=True, check=False
    )
    assert child.returncode == 9, child.stderr.decode()

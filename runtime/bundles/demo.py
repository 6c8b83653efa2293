"""``wasmgate serve --demo``: the example bundles, built and signed by a local demo key.

``prepare_demo(data_dir)`` (first run) generates an Ed25519 demo key, takes every example's
prebuilt adapter module (shipped with the package: no compiler runs, a gateway needs no Zig),
builds and signs each bundle into ``<data_dir>/demo/bundles`` and writes a trust file that
trusts the demo key **only** for the example names. Later runs reuse the key and rebuild
only what changed: each bundle is stamped with the hash of its inputs
(adapter module, bundle.toml, model files, key id, wasmgate version) and re-signed when that
hash differs or the signature nears expiry. ``apply_demo(settings)`` points the daemon at the
demo bundle directory, trust file, state and cache (all under ``<data_dir>/demo``), so a demo
never touches the operator's real trust store or anti-rollback state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import nacl.signing

from wasmgate import __version__
from wasmgate._compat import UTC
from wasmgate.guest_adapters.examples import (
    example_dir,
    example_names,
    reachable_names,
    stage_example,
)
from wasmgate.runtime.ops.config import Settings
from wasmgate.signing.build import build_bundle
from wasmgate.signing.keys import generate_key, key_id_of, read_private_key, write_private_key
from wasmgate.signing.trust import TrustStore
from wasmgate.typed import replace

__all__ = ["DemoSetup", "apply_demo", "prepare_demo"]

log = logging.getLogger("wasmgate.demo")

_VALIDITY = timedelta(days=365)
_RENEW_BEFORE = timedelta(days=30)


@dataclass(frozen=True)
class DemoSetup:
    """Where the demo lives; ``bundle_dir`` and ``trust_file`` go into ``Settings.paths``."""

    root: Path
    bundle_dir: Path
    trust_file: Path
    state_dir: Path
    cache_dir: Path
    key_id: str
    names: tuple[str, ...]
    rebuilt: tuple[str, ...]  # bundles (re)signed by this call; empty when all were current


def prepare_demo(data_dir: Path, *, names: tuple[str, ...] | None = None) -> DemoSetup:
    """Build, sign and trust the example bundles under ``data_dir/demo``; idempotent, cached."""
    root = data_dir / "demo"
    bundle_dir = root / "bundles"
    bundle_dir.mkdir(parents=True, exist_ok=True)
    chosen = tuple(names) if names is not None else tuple(example_names())
    key_path = root / "demo-signing.key"
    if not key_path.exists():
        write_private_key(key_path, generate_key())
    key = read_private_key(key_path)
    key_id = key_id_of(key.verify_key)
    rebuilt = []
    began = time.monotonic()
    for i, name in enumerate(chosen, 1):
        log.info(
            "demo: preparing example %d/%d: %s (%.1f s so far)",
            i,
            len(chosen),
            name,
            time.monotonic() - began,
        )
        src = stage_example(name, root / "src", cache_dir=root / "build-cache")
        if _sign_if_stale(src, name, key, key_id, bundle_dir):
            rebuilt.append(name)
    trust_file = root / "trust.json"
    # The key must cover every name a bundle is reachable by: the examples and their models.
    reachable = sorted({n for c in chosen for n in reachable_names(example_dir(c) / "bundle.toml")})
    _write_trust(trust_file, key, tuple(reachable))
    log.warning("DEMO MODE: trusting demo key %s for %s", key_id[:16], ", ".join(chosen))
    return DemoSetup(
        root=root,
        bundle_dir=bundle_dir,
        trust_file=trust_file,
        state_dir=root / "state",
        cache_dir=root / "cache",
        key_id=key_id,
        names=chosen,
        rebuilt=tuple(rebuilt),
    )


def apply_demo(settings: Settings, setup: DemoSetup | None = None) -> Settings:
    """``settings`` with the demo's paths (preparing the demo first unless ``setup`` is given)."""
    setup = setup or prepare_demo(settings.paths.data_dir)
    paths = replace(
        settings.paths,
        bundle_dir=setup.bundle_dir,
        trust_file=setup.trust_file,
        state_dir=setup.state_dir,
        cache_dir=setup.cache_dir,
    )
    return replace(settings, paths=paths)


def _inputs_hash(src: Path, key_id: str) -> str:
    h = hashlib.sha256(f"wasmgate {__version__}\0key {key_id}\0".encode())
    for path in sorted(src.iterdir()):
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    models = src.parent.parent / "models"
    for path in sorted(models.glob("*.onnx")) + sorted(models.glob("*.tflite")):
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _sign_if_stale(
    src: Path, name: str, key: nacl.signing.SigningKey, key_id: str, out_dir: Path
) -> bool:
    stamp_path = out_dir / f".{name}.stamp.json"
    digest = _inputs_hash(src, key_id)
    now = datetime.now(UTC)
    try:
        stamp = json.loads(stamp_path.read_text())
        fresh = stamp["inputs"] == digest and datetime.fromisoformat(stamp["expires"]) - now > (
            _RENEW_BEFORE
        )
        if fresh and (out_dir / stamp["file"]).is_file():
            return False
    except (OSError, ValueError, KeyError, TypeError):
        pass
    version = int(now.timestamp())  # monotonic across rebuilds, so anti-rollback accepts it
    out = out_dir / f"{name}.wgb"
    manifest = build_bundle(src, key, out, version=version, expires_in=_VALIDITY)
    stamp_path.write_text(
        json.dumps({"inputs": digest, "file": out.name, "expires": manifest.expires.isoformat()})
    )
    log.info("demo: built and signed %s version %d", name, version)
    return True


def _write_trust(path: Path, key: nacl.signing.SigningKey, names: tuple[str, ...]) -> None:
    store = TrustStore.empty().with_signer(
        key.verify_key,
        list(names),
        {},
        comment="wasmgate serve --demo key: trusted only in demo mode",
    )
    try:
        if path.read_bytes() == store.doc.to_json():
            return  # unchanged: do not touch the file the daemon watches
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    store.save(path)

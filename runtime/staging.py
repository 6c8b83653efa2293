"""Verify a bundle in a throw-away store before the real store records it.

The real `BundleStore.install` commits: the bundle becomes the name's active version and
the anti-rollback floor rises. The runtime must first know that the bundle *works* here
(adapter compiles, models load, selftest passes), or a bundle that fails to load would be
the active version after the next restart. So an install verifies into a private staging
store (same trust, same size limit: the full verification order), loads from its blobs,
and only then commits to the real store, which verifies again (a second hash pass: the
price of never recording a bundle that cannot serve).
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from wasmgate.signing.store import BundleStore, InstalledBundle
from wasmgate.signing.trust import TrustStore


@dataclass
class Staged:
    """A verified bundle in its staging store; `discard` deletes the staging directory."""

    store: BundleStore
    item: InstalledBundle
    directory: Path

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def stage(data: bytes | Path, root: Path, trust: TrustStore, max_bundle_bytes: int) -> Staged:
    """Fully verify ``data`` into a fresh store under ``root`` (blocking; SigningError)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory = root / secrets.token_hex(8)
    try:
        store = BundleStore(directory, trust, max_bundle_bytes=max_bundle_bytes)
        item = store.install(data)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Staged(store, item, directory)


def clear_staging(root: Path) -> None:
    """Remove what an interrupted install left behind (called at start)."""
    shutil.rmtree(root, ignore_errors=True)

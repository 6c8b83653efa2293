"""The pulled-bundle cache is bounded by age: what an old document pulled does not stay forever."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from wasmgate.runtime.fleet.pullcache import PullCache


def _put(cache: PullCache, data: bytes, age_s: float = 0.0) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = cache.put_bytes(digest, data)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return digest


def test_stale_files_go_recent_and_kept_ones_stay(tmp_path: Path) -> None:
    cache = PullCache(tmp_path / "pulled")
    old = _put(cache, b"old bundle", age_s=2 * 86400)
    old_but_wanted = _put(cache, b"still wanted", age_s=2 * 86400)
    fresh = _put(cache, b"fresh bundle")
    removed = cache.prune_stale(86400, keep=[old_but_wanted])
    assert removed == [old]
    assert cache.verified(old) is None
    assert cache.verified(old_but_wanted) is not None
    assert cache.verified(fresh) is not None
    assert cache.prune_stale(86400) == [old_but_wanted]

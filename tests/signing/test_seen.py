"""`SeenFiles`: a bundle file's remembered digest holds only while its stamp (ctime too) does.

The daemon-level attack (a newer or tampered bundle written over the file with its old mtime
put back, across a restart and a SIGKILL) is in tests/runtime/bundles/test_seen_files_daemon.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from wasmgate.signing.seen import FILES, RACY_NS, SeenFiles, Stamp, stamp

DIGEST, OTHER = "ab" * 32, "cd" * 32


def _settled_file(path: Path, data: bytes = b"bundle v1") -> Stamp:
    path.write_bytes(data)
    time.sleep((path.stat().st_ctime_ns + RACY_NS - time.time_ns()) / 1e9 + 0.05)
    now = stamp(path)
    assert now is not None
    assert now.settled
    return now


@pytest.fixture(scope="module")
def remembered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Stamp]:
    """One settled file (the racily-clean wait is paid once for the module)."""
    folder = tmp_path_factory.mktemp("seen")
    return folder, _settled_file(folder / "b.wgb")


def test_an_unchanged_file_keeps_its_digest_across_a_reopen(
    remembered: tuple[Path, Stamp],
) -> None:
    folder, taken = remembered
    path = folder / "b.wgb"
    seen = SeenFiles(folder)
    seen.remember(path, taken, DIGEST)
    seen.save([path])
    again = SeenFiles(folder)
    assert again.digest(path, taken) == DIGEST
    assert again.digest(folder / "other.wgb", taken) is None


def test_a_rewrite_with_the_old_mtime_put_back_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "b.wgb"
    taken = _settled_file(path, b"bundle v1")
    seen = SeenFiles(tmp_path)
    seen.remember(path, taken, DIGEST)
    with path.open("r+b") as f:  # same inode, same size
        f.write(b"bundle v2")
    os.utime(path, ns=(taken.mtime_ns, taken.mtime_ns))
    now = stamp(path)
    assert now is not None
    assert (now.size, now.mtime_ns, now.ino) == (taken.size, taken.mtime_ns, taken.ino)
    assert seen.digest(path, now) is None  # ctime moved: read and verify it again


def test_a_file_changed_just_now_is_not_remembered(tmp_path: Path) -> None:
    """A write in the same timestamp tick as the stamp would not move ctime."""
    path = tmp_path / "b.wgb"
    path.write_bytes(b"bundle")
    fresh = stamp(path)
    assert fresh is not None
    assert not fresh.settled
    seen = SeenFiles(tmp_path)
    seen.remember(path, fresh, DIGEST)
    assert seen.digest(path, fresh) is None
    seen.save([path])
    assert not (tmp_path / FILES).exists()  # nothing worth writing


def test_save_forgets_files_no_longer_there(remembered: tuple[Path, Stamp], tmp_path: Path) -> None:
    folder, taken = remembered
    path = folder / "b.wgb"
    seen = SeenFiles(tmp_path)
    seen.remember(path, taken, DIGEST)
    seen.remember(folder / "gone.wgb", taken, OTHER)
    seen.save([path])
    again = SeenFiles(tmp_path)
    assert again.digest(path, taken) == DIGEST
    assert again.digest(folder / "gone.wgb", taken) is None


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[]", b'{"format": "wasmgate-files/9", "files": {}}',
     b'{"format": "wasmgate-files/1", "files": {"/x": {"stamp": [1], "digest": "zz"}}}'],
)  # fmt: skip
def test_a_damaged_file_is_ignored(
    remembered: tuple[Path, Stamp], tmp_path: Path, content: bytes
) -> None:
    folder, taken = remembered
    (tmp_path / FILES).write_bytes(content)
    seen = SeenFiles(tmp_path)
    assert seen.digest(folder / "b.wgb", taken) is None  # hashed again, never an error
    seen.remember(folder / "b.wgb", taken, DIGEST)
    seen.save([folder / "b.wgb"])
    assert SeenFiles(tmp_path).digest(folder / "b.wgb", taken) == DIGEST

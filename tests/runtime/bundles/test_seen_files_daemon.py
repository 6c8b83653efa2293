"""Unchanged bundle files are not read again at start, and a rewritten one always is.

A real daemon serves ``probe`` v1 from its bundle directory; after one start has remembered
the file (`wasmgate.signing.seen`), the next start does not read it. The attack: the file is
rewritten in place with a bundle of the same size — a newer version the operator meant to
install, or a tampered copy — and its old mtime put back with ``os.utime`` (what ``cp -p``
or ``touch -r`` do too). Size, mtime, inode and device all match the remembered stamp; only
ctime, which no unprivileged program can set, tells the files apart. After a restart (clean,
or a SIGKILL right after the rewrite) the newer version serves, and the tampered copy is
refused while the store's verified v1 keeps serving. The running daemon's watcher sees the
same rewrite.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import wait_until
from tests.runtime.trustkit import Tenants, bundle_status, daemon_config, echo, serving
from wasmgate.signing.seen import RACY_NS

UNCHANGED = "1 files unchanged"


def _settle(path: Path) -> None:
    """Wait until ``path`` is old enough to be remembered (the racily-clean rule)."""
    left = path.stat().st_ctime_ns + RACY_NS - time.time_ns()
    time.sleep(max(0, left) / 1e9 + 0.1)


def _rewrite_keeping_mtime(path: Path, data: bytes) -> None:
    """Write ``data`` over ``path`` in place (same inode), then put its times back."""
    before = path.stat()
    assert len(data) == before.st_size  # the attack needs a file of the same size
    with path.open("r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    same = (after.st_size, after.st_mtime_ns, after.st_ino, after.st_dev)
    assert same == (before.st_size, before.st_mtime_ns, before.st_ino, before.st_dev)


def _remembered_start(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> tuple[Tenants, Path, Daemon]:
    """A daemon serving probe v1 from its bundle dir, restarted once: the file is remembered
    and the running daemon did not read it again."""
    tenants = Tenants(tmp_path / "kit", {"t": ["*"]})
    trust = tenants.write_trust(tmp_path / "trust.json")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    v1 = tenants.build("t", "probe", 1, out_dir=bundles)
    _settle(v1)
    config = daemon_config(trust) | {"log": {"level": "INFO"}}
    daemon = daemon_factory(config=config, name="d")
    assert echo(daemon, "probe") == (200, b"v1:hi")
    assert UNCHANGED not in daemon.log()  # the first start installs (and remembers) it
    daemon.stop()
    daemon.start()
    assert daemon.log().count(UNCHANGED) == 1  # not read: the skip under test is in force
    assert echo(daemon, "probe") == (200, b"v1:hi")
    return tenants, v1, daemon


@pytest.mark.parametrize("sigkill", [False, True], ids=["restart", "sigkill"])
def test_a_newer_version_written_over_the_file_with_its_old_mtime_installs(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], sigkill: bool
) -> None:
    tenants, v1, daemon = _remembered_start(tmp_path, daemon_factory)
    v2 = tenants.build("t", "probe", 2, out_dir=tmp_path)
    if sigkill:  # rewritten under the running daemon, killed before its watcher settles
        _rewrite_keeping_mtime(v1, v2.read_bytes())
        daemon.kill()
    else:
        daemon.stop()
        _rewrite_keeping_mtime(v1, v2.read_bytes())
    daemon.start()
    assert serving(daemon) == {"probe": 2}
    assert echo(daemon, "probe") == (200, b"v2:hi")
    assert daemon.log().count(UNCHANGED) == 1  # only the earlier start skipped it


def test_a_tampered_file_with_its_old_mtime_is_refused_and_v1_keeps_serving(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants, v1, daemon = _remembered_start(tmp_path, daemon_factory)
    daemon.stop()
    data = bytearray(v1.read_bytes())
    wasm = tenants.kit.wasm.read_bytes()
    data[data.index(wasm) + len(wasm) // 2] ^= 0xFF  # the adapter no longer hashes as signed
    _rewrite_keeping_mtime(v1, bytes(data))
    daemon.start()
    assert serving(daemon) == {"probe": 1}  # the store's copy, verified at this start
    assert echo(daemon, "probe") == (200, b"v1:hi")
    failures = bundle_status(daemon)["failures"]
    assert [f["source"] for f in failures] == [f"file {v1.name}"]
    assert "SHA-256 does not match" in failures[0]["message"]


def test_the_watcher_sees_a_rewrite_that_kept_the_mtime(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants, v1, daemon = _remembered_start(tmp_path, daemon_factory)
    v2 = tenants.build("t", "probe", 2, out_dir=tmp_path)
    _rewrite_keeping_mtime(v1, v2.read_bytes())
    wait_until(lambda: serving(daemon) == {"probe": 2}, 20, "v2 serving")
    assert echo(daemon, "probe") == (200, b"v2:hi")

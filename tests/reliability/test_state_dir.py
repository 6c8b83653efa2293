"""A damaged or full state directory: refuse clearly or recover, never accept a rollback.

The state directory holds the anti-rollback floors (``state.json`` + ``state.prev.json``),
the install records and the content-addressed blobs (``wasmgate.signing.store``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import TOKEN, put_bundle, served_version, wait_until


def _state(daemon: Daemon) -> Path:
    return daemon.workdir / "data" / "state"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture
def v1_and_v2(kit: BenchKit, models: object, tmp_path: Path) -> tuple[Path, Path]:
    """digits v1 (in the bundle dir) and v2 (built aside)."""
    v1 = kit.bundle_dir / "digits-1.wgb"
    v2 = kit.build("digits", models.digits_fp32, 2, out_dir=tmp_path)  # type: ignore[attr-defined]
    return v1, v2


@pytest.mark.timeout(90)
def test_unreadable_state_refuses_to_start(
    kit: BenchKit, v1_and_v2: tuple[Path, Path], daemon_factory: Callable[..., Daemon]
) -> None:
    """Both copies of the floors truncated, and v1 offered again: exit 2 with a clear
    message before listening (floors are never silently reset, so no rollback)."""
    v1, v2 = v1_and_v2
    shutil.copy(v2, kit.bundle_dir)
    daemon = daemon_factory(config=kit.config())
    assert served_version(daemon) == "2"
    daemon.stop()
    for name in ("state.json", "state.prev.json"):
        if (_state(daemon) / name).exists():
            _truncate(_state(daemon) / name)
    (kit.bundle_dir / v2.name).unlink()
    with pytest.raises(RuntimeError, match="exited 2") as refused:
        daemon.start()
    assert "anti-rollback state unreadable" in str(refused.value)
    assert "refusing to reset version floors" in str(refused.value)
    assert v1.exists()


@pytest.mark.timeout(90)
def test_damaged_newest_state_recovers_floor_and_refuses_rollback(
    kit: BenchKit, v1_and_v2: tuple[Path, Path], daemon_factory: Callable[..., Daemon]
) -> None:
    """Newest copy truncated, previous copy intact: the floor is rebuilt from the install
    records (v2), v2 keeps serving and v1 from the bundle directory is refused as a rollback."""
    _, v2 = v1_and_v2
    daemon = daemon_factory(config=kit.config({"http": {"management_token": TOKEN}}))
    assert put_bundle(daemon, v2.read_bytes())[0] == 201
    assert served_version(daemon) == "2"
    daemon.stop()
    assert (_state(daemon) / "state.prev.json").exists()
    _truncate(_state(daemon) / "state.json")
    daemon.start()
    assert served_version(daemon) == "2"
    failures = " ".join(str(f) for f in _bundles(daemon)["failures"])
    assert "rollback" in failures


def _bundles(daemon: Daemon) -> dict[str, list[object]]:
    req = urllib.request.Request(
        f"{daemon.url}/v1/bundles", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        doc: dict[str, list[object]] = json.loads(r.read())
    return doc


@pytest.mark.timeout(90)
def test_missing_blobs_at_start_are_named_and_recovered_from_the_bundle_file(
    kit: BenchKit, daemon_factory: Callable[..., Daemon]
) -> None:
    """Every blob deleted: the stored install is refused with the missing blob named (no
    crash), the bundle file still in the bundle directory re-installs it, and the next
    start is clean."""
    daemon = daemon_factory(config=kit.config())
    daemon.stop()
    for blob in (_state(daemon) / "blobs").iterdir():
        blob.unlink()
    daemon.start()
    assert served_version(daemon) == "1"
    assert "not in the store" in daemon.log()
    daemon.stop()
    log_size = len(daemon.log())
    daemon.start()
    assert served_version(daemon) == "1"
    assert "not in the store" not in daemon.log()[log_size:]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 7 MiB tmpfs (needs root, as CI runs); unmounted after the test."""
    mnt = tmp_path / "state-tmpfs"
    mnt.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=7m,mode=0700", "tmpfs", str(mnt)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"mount -t tmpfs needs root here: {done.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.timeout(120)
def test_disk_full_during_install_keeps_the_old_version(
    kit: BenchKit, models: object, small_tmpfs: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    """State on a 7 MiB tmpfs; v2 carries a 4.4 MB model, so its upload fits but staging it
    next to the upload hits ENOSPC (API); for the bundle directory (nothing uploaded) a
    ballast file leaves less free than the model. Refused with the reason, no leftovers,
    v1 keeps serving, also after a restart."""
    v2 = kit.build("digits", models.mobilenet_int8, 2, out_dir=small_tmpfs.parent)  # type: ignore[attr-defined]
    config = {"paths": {"state_dir": small_tmpfs}, "http": {"management_token": TOKEN}}
    daemon = daemon_factory(config=kit.config(config))
    try:
        used = _used(small_tmpfs)
        status, body = put_bundle(daemon, v2.read_bytes())
        assert status == 422, body
        assert b"No space left on device" in body
        assert served_version(daemon) == "1"
        api_used = used
        wait_until(lambda: _used(small_tmpfs) <= api_used + 64, 30, "staging space released (API)")
        _fill(small_tmpfs / "ballast", _free(small_tmpfs) - 2048)
        used = _used(small_tmpfs)
        shutil.copy(v2, kit.bundle_dir)  # the watcher installs from the bundle directory
        wait_until(lambda: "source=file digits-2.wgb" in daemon.log(), 30, "watcher refusal")
        assert served_version(daemon) == "1"
        # KiB, from df: also catches space held by unlinked files still open in the daemon
        wait_until(lambda: _used(small_tmpfs) <= used + 64, 30, "staging space released")
        daemon.stop()
        daemon.start()
        assert served_version(daemon) == "1"
    finally:
        daemon.stop()


def _df(mount: Path) -> list[str]:
    out = subprocess.run(["df", "-k", str(mount)], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[1].split()


def _used(mount: Path) -> int:
    return int(_df(mount)[2])


def _free(mount: Path) -> int:
    return int(_df(mount)[3])


def _fill(path: Path, kib: int) -> None:
    with path.open("wb") as f:
        for _ in range(kib):
            f.write(bytes(1024))

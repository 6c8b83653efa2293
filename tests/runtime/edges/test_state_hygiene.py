"""State a crash, a full disk or a reload leaves behind, against real daemons.

Stale uploads are deleted at start and uploads are bounded; a full disk during an upload is
a 507 while the data plane serves on (a tmpfs mounted in the daemon's own mount namespace);
the compiled-module cache keeps only installed bundles' entries; SIGHUP applies
``limits.max_output_bytes`` / ``limits.memory_mb`` to the sandbox at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, write_config
from tests.runtime.edges.probe import probe_daemon, request

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _data(tmp_path: Path, name: str = "d") -> Path:
    return tmp_path / name / "data"


def _echo(daemon: Daemon, text: bytes = b"ok") -> tuple[int, bytes]:
    got = request(daemon.port, "POST", "/v1/adapters/probe", b"P" + text)
    return got.status, got.body


def test_stale_uploads_are_swept_and_uploads_are_bounded(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    uploads = _data(tmp_path) / "state" / "uploads"
    uploads.mkdir(parents=True)
    (uploads / "crashed-put.wgb").write_bytes(b"x" * 1000)
    daemon = probe_daemon(tmp_path, daemon_factory, {"http": {"management_token": TOKEN}})
    assert list(uploads.iterdir()) == []
    head = (
        f"PUT /v1/bundles HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Length: 1000000\r\n\r\n"
    ).encode()
    with contextlib.ExitStack() as stack:
        for _ in range(4):  # four uploads that stall half-way hold the four upload slots
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", daemon.port), 10))
            sock.sendall(head + b"partial")
        for _ in range(100):  # bounded: until all four files exist
            if len(list(uploads.iterdir())) == 4:
                break
            _echo(daemon)
        fifth = request(daemon.port, "PUT", "/v1/bundles", b"y" * 100, AUTH)
        assert fifth.status == 429, fifth
        assert _echo(daemon) == (200, b"v1:ok")
    for _ in range(100):  # the closed uploads are deleted
        if not list(uploads.iterdir()):
            break
        _echo(daemon)
    assert list(uploads.iterdir()) == []


def _unshare() -> tuple[str, ...]:
    """A private mount namespace for the daemon, or skip when the host allows none."""
    cmd: tuple[str, ...] = ("unshare", "--mount")
    if os.geteuid() != 0:
        cmd = ("unshare", "--user", "--map-root-user", "--mount")
    if shutil.which("unshare") is None or subprocess.run([*cmd, "true"], check=False).returncode:
        pytest.skip("no private mount namespace available (unshare)")
    return cmd


def test_a_full_disk_during_an_upload_is_507_and_serving_goes_on(tmp_path: Path) -> None:
    uploads = _data(tmp_path) / "state" / "uploads"
    uploads.mkdir(parents=True)
    mount = 'mount -t tmpfs -o size=64k,mode=0700 tmpfs "$0" && exec "$@"'
    prefix = (*_unshare(), "sh", "-c", mount, str(uploads))
    started: list[Daemon] = []

    def factory(config: dict[str, Any], name: str) -> Daemon:
        (tmp_path / name).mkdir(exist_ok=True)
        started.append(Daemon(tmp_path / name, config, prefix=prefix))
        started[-1].start()
        return started[-1]

    try:
        daemon = probe_daemon(tmp_path, factory, {"http": {"management_token": TOKEN}})
        full = request(daemon.port, "PUT", "/v1/bundles", b"z" * 200_000, AUTH)
        assert full.status == 507, full
        assert "no space left" in full.json()["error"]
        assert _echo(daemon) == (200, b"v1:ok")
        assert request(daemon.port, "GET", "/v1/bundles", headers=AUTH).status == 200
    finally:
        for d in started:
            d.stop()


def test_module_cache_keeps_only_installed_bundles(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    modules = _data(tmp_path) / "cache" / "modules"
    modules.mkdir(parents=True, mode=0o700)
    stale = [modules / f"{'ab' * 32}-{'0' * 32}.cwasm", modules / "tmpabc.tmp"]
    for path in stale:
        path.write_bytes(b"old")
    daemon = probe_daemon(tmp_path, daemon_factory, {"http": {"management_token": TOKEN}})
    assert not [p for p in stale if p.exists()]
    kept = list(modules.glob("*.cwasm"))
    assert len(kept) == 1, kept  # the probe adapter's own entry
    gone = request(daemon.port, "DELETE", "/v1/bundles/probe", headers=AUTH)
    assert gone.status == 200, gone
    assert list(modules.glob("*.cwasm")) == []


def _reload(daemon: Daemon, limits: dict[str, Any]) -> None:
    config = tomllib.loads(daemon.config_path.read_text())
    config["limits"] = {**config.get("limits", {}), **limits}
    write_config(daemon.config_path, config)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)


def test_sighup_applies_sandbox_limits_at_once(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory)
    long = b"x" * 200
    assert _echo(daemon, long) == (200, b"v1:" + long)
    _reload(daemon, {"max_output_bytes": 64})
    for _ in range(200):  # bounded: until the reload is applied
        status, body = _echo(daemon, long)
        if status != 200:
            break
    assert status == 500, body
    assert b"too large" in body
    assert _echo(daemon) == (200, b"v1:ok")  # small answers still fit
    _reload(daemon, {"max_output_bytes": 1024 * 1024, "memory_mb": 1})
    for _ in range(200):  # until the reload is applied: the old 64-byte ceiling stops answering
        status, body = _echo(daemon, long)
        if b"too large" not in body:
            break
    assert status == 500, body
    assert b"memory" in body, body

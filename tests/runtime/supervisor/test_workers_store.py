"""Installs through the API while workers start and end, with ``[workers] count = 2``.

A worker's start loads the store as a restarted daemon would, but beside a running
supervisor: what a crash would have left (an upload's file, an install's staged blobs) is
the supervisor's work in progress, and the worker leaves it alone. Before, a worker that
started (replaced after a crash, or in a roll) during an upload deleted the file the
supervisor was receiving, and the install failed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.fixtures.waits import until
from tests.runtime.supervisor.workerkit import digits_gateway, until_replaced, until_serving

pytestmark = pytest.mark.timeout(300)
TOKEN = "store-token"


@pytest.fixture
def gateway(tmp_path: Path, models: Any) -> Iterator[tuple[Daemon, BenchKit]]:
    with digits_gateway(tmp_path, models, http={"management_token": TOKEN}) as both:
        yield both


def server_pid(client: socket.socket, port: int, pids: list[int]) -> int:
    """Which of ``pids`` holds the server end of ``client``'s connection to ``port`` (a
    connection still in the accept queue has inode 0: looked at again until accepted)."""
    local_port = client.getsockname()[1]
    wanted = (f"0100007F:{port:04X}", f"0100007F:{local_port:04X}")
    deadline = time.monotonic() + 10
    while True:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
        (inode,) = [f[9] for f in map(str.split, lines) if (f[1], f[2]) == wanted]
        for pid in pids:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):  # an fd closed meanwhile
                    if str(fd.readlink()) == f"socket:[{inode}]":
                        return pid
        if time.monotonic() > deadline:
            raise LookupError(f"no process of {pids} holds socket {inode}")
        time.sleep(0.05)


def test_a_worker_started_during_an_upload_leaves_it_to_the_supervisor(
    gateway: tuple[Daemon, BenchKit], models: Any, tmp_path: Path
) -> None:
    daemon, kit = gateway
    data = kit.build("other", models.digits_fp32, out_dir=tmp_path).read_bytes()
    uploads = daemon.workdir / "data" / "state" / "uploads"
    pids = [int(w["pid"]) for w in until_serving(daemon, 2)]  # type: ignore[call-overload]
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=60) as client:
        head = (
            f"PUT /v1/bundles HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        half = len(data) // 2
        client.sendall(head.encode() + data[:half])
        # the supervisor is receiving it (the relaying worker streams it on)
        until(lambda: any(uploads.glob("*.wgb")), "the upload in the supervisor", 30)
        relaying = server_pid(client, daemon.port, pids)
        (other,) = [p for p in pids if p != relaying]
        os.kill(other, signal.SIGKILL)
        until_replaced(daemon, other, timeout=120)  # a new worker started meanwhile
        client.sendall(data[half:])
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 201 "), answer[:400]
    assert not any(uploads.glob("*.wgb"))  # the supervisor removed its own file
    assert "deleted 1 stale uploads" not in daemon.log()


def put_over(client: socket.socket, data: bytes) -> bytes:
    """``PUT /v1/bundles`` of ``data`` on ``client``; what came back until the end."""
    head = (
        f"PUT /v1/bundles HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    client.sendall(head.encode() + data)
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := client.recv(65536):
            answer += chunk
    return answer


def test_an_install_relayed_by_the_first_worker_in_the_roll_is_answered(
    tmp_path: Path, models: Any
) -> None:
    kit = BenchKit(tmp_path / "kit")
    kit.build("digits", models.digits_fp32)
    data = kit.build("other", models.digits_fp32, out_dir=tmp_path).read_bytes()
    # A short drain: a replaced worker ends about 1 s after its replacement serves, sooner
    # than the next worker's replacement starts serving.
    extra = {"workers": {"count": 2}, "http": {"management_token": TOKEN}, "drain_s": 1}
    (tmp_path / "gw").mkdir()
    daemon = Daemon(tmp_path / "gw", kit.config(extra))
    daemon.start(timeout=240)
    try:
        workers = until_serving(daemon, 2)
        pids = [int(w["pid"]) for w in workers]  # type: ignore[call-overload]
        for _ in range(100):  # a connection the first worker in the roll's order took
            client = socket.create_connection(("127.0.0.1", daemon.port), timeout=120)
            if server_pid(client, daemon.port, pids) == pids[0]:
                break
            client.close()
        else:
            pytest.fail("no connection reached the first worker")
        with client:
            answer = put_over(client, data)
        assert answer.startswith(b"HTTP/1.1 201 "), answer[:400]
        assert all(w["pid"] not in pids for w in until_serving(daemon, 2))  # both replaced
    finally:
        daemon.stop()

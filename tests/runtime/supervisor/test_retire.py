"""`wasmgate.runtime.supervisor.children.retire`: a roll ends only once the replaced worker
has let go of the listening socket it shares with its successor, not when it was asked to.

The worker here is a small process holding an inherited listening socket that closes it a
while after SIGTERM (as a real worker does once its loop has run the stop), then goes on
living (a real one drains and may be relaying the call that waits for the roll)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from wasmgate.runtime.supervisor import children

CHILD = """
import signal, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
late = float(sys.argv[2])
def stop(*_):
    if late >= 0:
        time.sleep(late)
        sock.close()
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


async def _worker(listener: socket.socket, late_s: float) -> asyncio.subprocess.Process:
    fd = listener.fileno()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(fd), str(late_s),
        pass_fds=(fd,), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    return proc


def _holds(pid: int, listener: socket.socket) -> bool:
    wanted = f"socket:[{os.fstat(listener.fileno()).st_ino}]"
    return any(str(fd.readlink()) == wanted for fd in Path(f"/proc/{pid}/fd").iterdir())


async def _retired_after(late_s: float) -> tuple[float, bool, bool]:
    """How long `retire` took, whether the worker still held the socket then, and whether
    it was still running."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        proc = await _worker(listener, late_s)
        try:
            assert _holds(proc.pid, listener)
            began = time.monotonic()
            await children.retire(proc, listener)
            took = time.monotonic() - began
            return took, _holds(proc.pid, listener), proc.returncode is None
        finally:
            proc.kill()
            await proc.wait()


def test_a_roll_waits_until_the_old_worker_let_go_of_the_socket() -> None:
    took, holds, running = asyncio.run(_retired_after(0.4))
    assert not holds
    assert running, "retire waits for the socket, not for the exit"
    assert took >= 0.4, f"returned after {took:.2f} s, while the worker still accepted"


def test_a_worker_that_never_lets_go_is_left_after_a_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(children, "_LET_GO_S", 0.3)
    with caplog.at_level(logging.WARNING, logger="wasmgate.supervisor"):
        took, holds, running = asyncio.run(_retired_after(-1))
    assert holds
    assert running
    assert 0.3 <= took < 5.0
    assert "still holds the listening socket" in caplog.text


def test_a_worker_that_already_ended_is_retired_at_once() -> None:
    async def ended() -> float:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            proc = await _worker(listener, 0.0)
            proc.kill()
            await proc.wait()
            began = time.monotonic()
            await children.retire(proc, listener)
            return time.monotonic() - began

    assert asyncio.run(ended()) < 0.5

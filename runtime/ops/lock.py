"""One daemon per data directory: an ``fcntl`` lock held for the daemon's lifetime.

Two daemons on one data directory would race on the anti-rollback state, the blob store and
(``--demo``) the demo build; the second one refuses to start with one line naming the first
one's pid. The kernel drops the lock when the process dies, even by SIGKILL, so a stale lock
file never blocks a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from wasmgate.runtime.errors import ConfigError

LOCK_NAME = ".wasmgate.lock"


@contextlib.contextmanager
def data_dir_lock(directory: Path) -> Iterator[Path]:
    """Hold ``directory/.wasmgate.lock`` exclusively; ConfigError when another holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            raise ConfigError(
                f"{directory} is in use by another wasmgate serve (pid {holder}): stop it, "
                "or give this one its own paths.data_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def flocked(fd: int) -> Iterator[None]:
    """``fd``'s file locked exclusively for the block: the tables the gateway's processes
    share (`wasmgate.runtime.serving.slots`, the MQTT dedupe table). The kernel drops the
    lock of a process that dies inside the block. Not a lock between one process's threads
    (they share the descriptor): callers use it from their event loop only."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)

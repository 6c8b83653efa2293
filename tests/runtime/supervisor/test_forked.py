"""`Forked`: a child the supervisor did not start through asyncio (a worker the zygote forked,
handed over), watched by pidfd and reaped with ``waitid(P_PIDFD)``, beside asyncio's own
children, whose statuses its child watcher must still get (and this one must not miss)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from wasmgate.runtime.supervisor.zygote import Forked


def _spawn(*argv: str) -> int:
    return os.posix_spawn(argv[0], list(argv), dict(os.environ))


async def test_exit_codes_and_signals_beside_asyncio_children() -> None:
    sleeper = Forked(_spawn(sys.executable, "-c", "import time; time.sleep(60)"))
    quitter = Forked(_spawn("/bin/sh", "-c", "sleep 0.2; exit 7"))
    theirs = await asyncio.create_subprocess_exec("/bin/sh", "-c", "sleep 0.1; exit 3")
    assert await quitter.wait() == 7
    assert sleeper.returncode is None  # the other's end read nothing of this one
    assert await theirs.wait() == 3  # asyncio's watcher got its own child's status
    sleeper.send_signal(signal.SIGKILL)
    assert await sleeper.wait() == -signal.SIGKILL
    sleeper.send_signal(signal.SIGTERM)  # reaped: signals nothing (no reused pid)


async def test_a_child_that_ended_before_it_was_watched_is_still_read() -> None:
    pid = _spawn("/bin/sh", "-c", "exit 4")
    await asyncio.sleep(0.3)  # a zombie by now: its pid stays ours until reaped
    assert await Forked(pid).wait() == 4


async def test_many_waiters_see_the_same_status() -> None:
    child = Forked(_spawn("/bin/sh", "-c", "kill -TERM $$"))
    codes = await asyncio.gather(child.wait(), child.wait())
    assert list(codes) == [-signal.SIGTERM, -signal.SIGTERM]

"""Who a process dies with and who reaps it (``prctl`` over ctypes, in one place).

A data-plane worker and the zygote that forks workers must not outlive the supervisor
(`die_with`): an orphaned worker would go on accepting on the gateway's port beside the next
supervisor's workers, with what it loaded from a store it no longer follows. A worker the
zygote forks is handed to the supervisor (`become_subreaper`), so the supervisor reaps it
and reads its real exit status, as it does for a worker it started itself.
"""

from __future__ import annotations

import ctypes
import os
import signal

__all__ = ["become_subreaper", "die_with", "name_process"]

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int | bytes) -> int:
    """0, or the errno of the failed call."""
    libc = ctypes.CDLL(None, use_errno=True)
    return 0 if libc.prctl(option, value, 0, 0, 0) == 0 else ctypes.get_errno()


def die_with(parent: int) -> bool:
    """SIGKILL this process when ``parent`` (its parent now) ends, however it ends.

    False if ``parent`` is no longer the parent once the request took effect (it ended
    before: the caller must exit) or the kernel refused (errno raised as OSError)."""
    error = _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if error:
        raise OSError(error, f"PR_SET_PDEATHSIG: {os.strerror(error)}")
    return os.getppid() == parent


def become_subreaper() -> None:
    """The orphans among this process's descendants (a worker whose forking parent exited
    at once) become its children, not init's (OSError when the kernel refuses)."""
    error = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if error:
        raise OSError(error, f"PR_SET_CHILD_SUBREAPER: {os.strerror(error)}")


def name_process(name: str) -> None:
    """The name ``ps``, ``top`` and ``/proc/PID/comm`` show (15 bytes; a forked process
    keeps its parent's command line, so this is what tells a zygote from a worker)."""
    _prctl(_PR_SET_NAME, name.encode()[:15])

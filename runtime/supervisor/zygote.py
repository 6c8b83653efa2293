"""The supervisor's end of the zygote: the process its workers are forked from.

A worker forked from a zygote shares, copy-on-write, every page the zygote had: the
imports of the worker's modules and of ONNX Runtime, ONNX Runtime's operator-schema
registry (built by one session with one thread) and, for the zygote ``wasmgate serve``
forks before it starts a thread (`Seed`), the supervisor's own import heap. The zygote
runs `gc.freeze()` before it forks, so no collection in a worker walks (and copies) those
pages. An ``exec``ed worker shares none of it: ~57 MB more a worker, measured.

The zygote stays single-threaded and only forks on request: a message on a
``SOCK_SEQPACKET`` pair with the spec and, as ``SCM_RIGHTS``, the worker's listening
socket; it answers with the worker's pid and only then lets the worker run (a worker whose
pid was lost with a zygote killed in between exits). It forks twice, so the worker's parent
exits at once and the worker becomes the supervisor's child (the supervisor is a child
subreaper): the supervisor reaps it with a pidfd (`Forked`) and reads its real exit status,
and the worker dies with the supervisor (``PR_SET_PDEATHSIG``), not with the zygote. A
zygote that ends is started again (``exec``ed: one forked from a supervisor with threads
could inherit a lock held by one of them); one that cannot be had (three starts in a row
that do not become ready, or a kernel without pidfds) leaves the workers to be ``exec``ed,
as without it, logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Protocol

from wasmgate._compat import Self, timeout
from wasmgate.runtime.ops.parentage import become_subreaper

__all__ = [
    "SUPERVISOR_ONLY", "Forked", "ProcessHandle", "Seed", "Zygote", "describe_exit", "worker_env",
]  # fmt: skip

log = logging.getLogger("wasmgate.supervisor")

_READY_S = 120.0
"""How long a zygote may take to import and warm up (an exec'd one, on a loaded machine)."""
_FORK_S = 10.0
_GIVE_UP = 3
"""Starts in a row that do not become ready before the workers are exec'd instead."""


class ProcessHandle(Protocol):
    """What the pool uses of a worker's process (`asyncio.subprocess.Process` has it)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def send_signal(self, sig: int) -> None: ...


class Forked:
    """A child this process did not start through asyncio (a forked zygote, a worker the
    zygote forked): watched with a pidfd, reaped with ``waitid(P_PIDFD)`` so asyncio's
    child watcher (which waits for its own pids only) neither steals nor misses its status."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._fd = os.pidfd_open(pid)
        self._code: int | None = None
        self._done = asyncio.Event()
        asyncio.get_running_loop().add_reader(self._fd, self._reap)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._code

    def _reap(self) -> None:
        result = os.waitid(os.P_PIDFD, self._fd, os.WEXITED | os.WNOHANG)
        if result is None:
            return  # readable before the kernel filled the status in
        killed = result.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        self._code = -result.si_status if killed else result.si_status
        asyncio.get_running_loop().remove_reader(self._fd)
        os.close(self._fd)
        self._done.set()

    async def wait(self) -> int:
        await self._done.wait()
        assert self._code is not None  # noqa: S101 - set before the event
        return self._code

    def send_signal(self, sig: int) -> None:
        if self._code is None:  # the pidfd is still open: it names this process, never a reuse
            signal.pidfd_send_signal(self._fd, sig)


def describe_exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


@dataclass
class Seed:
    """The zygote ``wasmgate serve`` forked before it started a thread (its socket's end)."""

    pid: int
    sock: socket.socket


class Zygote:
    """One zygote at a time: started (or adopted from a `Seed`), asked for workers, started
    again when it ends. An async context: it ends the zygote on the way out."""

    def __init__(self, seed: Seed | None, *, wanted: bool = True) -> None:
        """``wanted``: False (``[workers] zygote = false``) execs every worker."""
        self._seed = seed
        self._proc: ProcessHandle | None = None
        self._sock: socket.socket | None = None
        self._settled = asyncio.Event()
        """Set while the zygote is ready, and once none can be had ("off")."""
        self._asking = asyncio.Lock()
        self._keeper: asyncio.Task[None] | None = None
        self._failed = 0
        self._fallback_told = False
        self.state, self.started, self.restarts, self.last_exit = "starting", "", 0, ""
        if not wanted:
            self.state, self._fallback_told = "off", True
            self._settled.set()

    async def __aenter__(self) -> Self:
        """Adopt the seed (or exec a zygote) and keep one running."""
        if self.state == "off":
            return self
        try:
            os.close(os.pidfd_open(os.getpid()))  # Linux 5.3+; waitid(P_PIDFD) 5.4+
            become_subreaper()  # before the first fork: a worker becomes this process's child
        except OSError as e:
            log.error("%s: workers are started as fresh interpreters", e)  # noqa: TRY400
            self.state = "off"
            self._settled.set()
            return self
        self._keeper = asyncio.create_task(self._keep(), name="zygote")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        await self._end()
        if self._seed is not None:  # never adopted: a start that failed before the workers
            self._seed.sock.close()  # it reads the end and exits (and dies with this process)

    async def _keep(self) -> None:
        """Start the zygote, wait for it to end, start it again (exec'd) — until it cannot
        be had `_GIVE_UP` times in a row."""
        while self._failed < _GIVE_UP:
            began = time.monotonic()
            if await self._start():
                self._failed, self.state = 0, "ready"
                self._settled.set()
                assert self._proc is not None  # noqa: S101 - started
                self.last_exit = describe_exit(await self._proc.wait())
                self._settled.clear()
            else:
                self._failed += 1
            self.restarts, self.state = self.restarts + 1, "restarting"
            log.error("zygote ended (%s): starting another", self.last_exit)
            await self._end()
            await asyncio.sleep(0.5 if time.monotonic() - began < 10 else 0.0)
        self.state = "off"
        self._settled.set()
        log.error("no zygote after %d starts: workers are started as fresh interpreters", _GIVE_UP)

    async def _start(self) -> bool:
        """Adopt the seed or exec a zygote; True once it said it is ready."""
        try:
            if self._seed is not None:
                seed, self._seed = self._seed, None
                self._proc, self._sock, self.started = Forked(seed.pid), seed.sock, "forked"
            else:
                self._proc, self._sock = await _exec_zygote()
                self.started = "exec"
            self._sock.setblocking(False)  # noqa: FBT003 - the socket module's signature
            async with timeout(_READY_S):
                said = await asyncio.get_running_loop().sock_recv(self._sock, 4096)
        except (OSError, TimeoutError) as e:
            self.last_exit = f"did not start: {str(e) or 'timeout'}"
            return False
        if said != b"R":
            why = said[1:].decode(errors="replace") if said[:1] == b"E" else ""
            self.last_exit = why or "ended before it was ready"
        return said == b"R"

    async def _end(self) -> None:
        """The zygote killed and reaped, its socket closed (its forked workers live on)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGKILL)
            await self._proc.wait()
        if self._sock is not None:
            self._sock.close()
        self._proc = self._sock = None

    async def fork(self, spec: bytes, listener: int) -> Forked | None:
        """A worker forked with ``spec`` (its JSON) and ``listener``; None when no zygote can
        be had (the caller execs the worker, as without one; logged once)."""
        with contextlib.suppress(TimeoutError):
            async with timeout(_READY_S):
                await self._settled.wait()
        pid = await self._ask(spec, listener) if self.state == "ready" else None
        if pid is not None:
            return Forked(pid)
        if not self._fallback_told:
            self._fallback_told = True
            log.error("no zygote to fork a worker from: it is started as a fresh interpreter")
        return None

    async def _ask(self, spec: bytes, listener: int) -> int | None:
        async with self._asking:
            sock, loop = self._sock, asyncio.get_running_loop()
            if sock is None:
                return None
            try:
                socket.send_fds(sock, [spec], [listener])
                async with timeout(_FORK_S):
                    answer = await loop.sock_recv(sock, 4096)
            except (OSError, TimeoutError) as e:
                log.error("the zygote did not answer (%s): killed", str(e) or "timeout")  # noqa: TRY400
                answer = b""
            if answer[:1] == b"P" and len(answer) == 5:
                return int.from_bytes(answer[1:], "little")
            if answer[:1] == b"E":
                why = answer[1:].decode(errors="replace")
                log.error("the zygote could not fork a worker: %s", why)
            if self._proc is not None:  # one that fails a fork is started again
                with contextlib.suppress(ProcessLookupError):
                    self._proc.send_signal(signal.SIGKILL)
            return None

    def describe(self) -> dict[str, object]:
        proc = self._proc
        return {
            "state": self.state,
            "pid": proc.pid if proc is not None and proc.returncode is None else None,
            "started": self.started,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        }


async def _exec_zygote() -> tuple[ProcessHandle, socket.socket]:
    """``wasmgate serve --zygote FD``: a fresh interpreter that becomes the zygote."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "wasmgate", "serve", "--zygote", str(theirs.fileno()),
            stdin=asyncio.subprocess.DEVNULL, pass_fds=(theirs.fileno(),), env=worker_env(),
        )  # fmt: skip
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return proc, ours


def worker_env() -> dict[str, str]:
    """This process's environment less systemd's variables: a worker (or a zygote) must not
    notify systemd or claim the supervisor's sockets."""
    return {k: v for k, v in os.environ.items() if not k.startswith(SUPERVISOR_ONLY)}


SUPERVISOR_ONLY = ("NOTIFY_SOCKET", "WATCHDOG_", "LISTEN_")
"""systemd's variables are the supervisor's."""

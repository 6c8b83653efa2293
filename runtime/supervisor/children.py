"""The worker processes: started, watched, restarted, replaced and stopped by the supervisor.

A worker is forked from the zygote (`wasmgate.runtime.supervisor.zygote`) with its
`WorkerSpec` and the gateway's listening socket in one message, or, when no zygote can be
had, ``python -m wasmgate serve --worker`` with the spec on stdin and the socket inherited
as a file descriptor (`Worker.spawn`). The supervisor
talks to it over its private Unix socket (`Worker.private`, a 0700 directory of the
supervisor's): readiness (``/v2/health/ready``) before it counts as serving, liveness
(``/v2/health/live``) every second as the watchdog — a worker whose event loop does not
answer for `HUNG_S` is killed — and the management calls every worker must apply.

A worker that exits unexpectedly is started again at once; one that dies within
`QUICK_EXIT_S` of its start again and again backs off (0.5 s doubling to 30 s) and shows
as ``crashing`` in the status document until a start lasts.
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
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec

from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.supervisor.zygote import ProcessHandle, Zygote, describe_exit, worker_env
from wasmgate.typed import convert, plain

__all__ = [
    "HUNG_S",
    "QUICK_EXIT_S",
    "Worker",
    "WorkerSpec",
    "decode_spec",
    "retire",
    "unix_session",
]

log = logging.getLogger("wasmgate.supervisor")

HUNG_S = 5.0
"""A worker whose event loop has not answered its liveness probe for this long is killed."""
QUICK_EXIT_S = 10.0
"""An exit this soon after the start counts towards the crash back-off."""
_PROBE_S = 1.0
_BACKOFF_MAX_S = 30.0
_LET_GO_S = 5.0


class WorkerSpec(msgspec.Struct, frozen=True):
    """What a worker is told at start (on its stdin, so no secret lands in its environment)."""

    index: int
    settings: Settings
    config_path: str | None
    control: str
    """The supervisor's Unix socket: what the worker does not serve itself goes there."""
    private: str
    """The worker's own Unix socket (the supervisor's probes and fan-out)."""
    listen_fd: int
    allowed: list[int]
    """The CPUs the gateway may use (the supervisor's own threads are pinned to one)."""
    cpu: int
    part: int
    """This worker's share of the gateway's queue: part ``part`` of ``parts``."""
    parts: int
    slots: str
    """The gateway's running-slot table (`wasmgate.runtime.serving.slots`)."""
    slot_column: int
    dedupe: str
    """The gateway's MQTT dedupe table (`wasmgate.runtime.mqtt.dedupe_shared`)."""
    replaces: int | None = None
    """The pid of the worker this one replaces, still finishing its work: this worker's
    MQTT connection (the same client id, the same broker session) waits for it to end."""


def decode_spec(data: bytes) -> WorkerSpec:
    """The spec from what `Worker.spawn` wrote (paths and durations as the config has them)."""
    return convert(msgspec.json.decode(data), WorkerSpec, strict=False, whole="worker spec")


def unix_session(path: str, timeout_s: float) -> aiohttp.ClientSession:
    """A client over one Unix socket (the host in its URLs is only a name)."""
    return aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=path),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    )


@dataclass
class Worker:
    """One worker slot: its current process and its history."""

    index: int
    private: str
    pid: int | None = None
    state: str = "starting"
    started_at: float = 0.0
    restarts: int = 0
    quick_exits: int = 0
    last_exit: str = ""
    column: int = 0
    """Its column in the gateway's slot table."""
    proc: ProcessHandle | None = field(default=None, repr=False)

    async def spawn(self, spec: WorkerSpec, listener: int, zygote: Zygote | None) -> None:
        """Start the process (``listener``: the fd it inherits, as ``spec.listen_fd``):
        forked from ``zygote``, or exec'd when there is none to be had."""
        data = msgspec.json.encode(plain(spec))
        forked = await zygote.fork(data, listener) if zygote is not None else None
        self.proc = forked if forked is not None else await _exec(data, listener)
        self.pid, self.state, self.started_at = self.proc.pid, "starting", time.monotonic()
        how = "forked" if forked is not None else "exec"
        log.info("worker %d started", self.index, extra={"pid": self.pid, "start": how})

    async def ready(self, timeout_s: float) -> bool:
        """Wait until the worker answers ready on its private socket (or exits, or times out)."""
        deadline = time.monotonic() + timeout_s
        async with unix_session(self.private, 2.0) as http:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.returncode is not None:
                    return False
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get("http://localhost/v2/health/ready") as answer:
                        if answer.status == 200:
                            self.state = "serving"
                            return True
                await asyncio.sleep(0.05)
        return False

    async def watch(self) -> None:
        """The watchdog: kill the worker when its loop stops answering for `HUNG_S`."""
        last_ok = time.monotonic()
        async with unix_session(self.private, _PROBE_S * 2) as http:
            while self.proc is not None and self.proc.returncode is None:
                await asyncio.sleep(_PROBE_S)
                try:
                    async with http.get("http://localhost/v2/health/live") as answer:
                        if answer.status == 200:
                            last_ok = time.monotonic()
                except (aiohttp.ClientError, OSError, TimeoutError):
                    pass
                if time.monotonic() - last_ok > HUNG_S and self.state == "serving":
                    log.error("worker %d hung: no answer for %.0f s, killed", self.index, HUNG_S)
                    self.last_exit = f"killed by the watchdog: no answer for {HUNG_S:.0f} s"
                    self.signal(signal.SIGKILL)
                    return

    def exited(self, code: int) -> float:
        """Record an exit; returns the back-off before the next start."""
        lived = time.monotonic() - self.started_at
        how = describe_exit(code)
        if not self.last_exit.startswith("killed by the watchdog"):
            self.last_exit = how
        self.restarts += 1
        self.quick_exits = self.quick_exits + 1 if lived < QUICK_EXIT_S else 0
        self.state = "crashing" if self.quick_exits > 1 else "restarting"
        self.pid = None
        if self.quick_exits <= 1:
            return 0.0
        return float(min(_BACKOFF_MAX_S, 0.5 * 2.0 ** (self.quick_exits - 2)))

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def describe(self) -> dict[str, object]:
        state = self.state
        if self.quick_exits > 1 and time.monotonic() - self.started_at < QUICK_EXIT_S:
            state = "crashing"  # until a start lasts: a loop must not look healthy between
        return {
            "index": self.index,
            "pid": self.pid,
            "state": state,
            "uptime_s": round(time.monotonic() - self.started_at, 1) if self.pid else 0,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        }


async def _exec(spec: bytes, listener: int) -> ProcessHandle:
    """``python -m wasmgate serve --worker``, the spec on its stdin (not in its environment)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wasmgate", "serve", "--worker",
        stdin=asyncio.subprocess.PIPE, pass_fds=(listener,), env=worker_env(),
    )  # fmt: skip
    assert proc.stdin is not None  # noqa: S101 - asked for above
    proc.stdin.write(spec)
    proc.stdin.close()
    return proc


def private_socket(run_dir: Path, index: int, generation: int) -> str:
    return str(run_dir / f"w{index}-{generation}.sock")


async def retire(old: ProcessHandle, listener: socket.socket) -> None:
    """Ask a replaced worker to stop (SIGTERM: it stops accepting, finishes, exits) and
    wait until it has let go of ``listener``, which it shares with its successor: until
    then a new connection may still reach the version the roll replaces, so a roll (and
    the API call waiting for it) must not end before. Not until it exits: it may be
    relaying the very call that waits for the roll."""
    with contextlib.suppress(ProcessLookupError):
        old.send_signal(signal.SIGTERM)
    held = f"socket:[{os.fstat(listener.fileno()).st_ino}]"
    deadline = time.monotonic() + _LET_GO_S
    while _holds(old.pid, held):
        if time.monotonic() > deadline:
            log.warning("replaced worker (pid %d) still holds the listening socket after "
                        "%.0f s", old.pid, _LET_GO_S)  # fmt: skip
            return
        await asyncio.sleep(0.01)


def _holds(pid: int, link: str) -> bool:
    """Whether process ``pid`` has a descriptor of ``link`` (``socket:[inode]``) open; an
    ended process (a zombie too) holds none."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            if str(fd.readlink()) == link:
                return True
    return False

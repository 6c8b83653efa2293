"""Restricted WASI preview1 for daemon adapters.

Invariants:
- A daemon guest's ``WasiConfig`` has no preopened directories, no environment, no
  arguments and no stdin; stdout/stderr go to size-capped callbacks (the request's log).
  ``path_open`` therefore fails with EBADF: no filesystem is reachable.
- Socket calls (``sock_*``) and ``proc_raise`` are shadowed to return ENOTSUP/ENOSYS.
- ``poll_oneoff`` is shadowed: wasmtime's version blocks in host code that neither epoch
  nor fuel can interrupt. Ours sleeps at most until the request's deadline (plus two epoch
  ticks, so the epoch check traps as soon as the guest runs again); fd subscriptions
  complete at once. ``sched_yield`` returns immediately, so a yield loop is plain wasm
  that the epoch deadline interrupts.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import wasmtime

from wasmgate.sandbox.memory import GuestMemory, GuestPointerError, MissingMemoryError
from wasmgate.sandbox.rawcall import CallbackKeeper, caller_memory, define_raw

__all__ = ["WASI_FUNCTIONS", "define_restricted_wasi", "restricted_wasi_config"]

WASI_MODULE = "wasi_snapshot_preview1"
WASI_FUNCTIONS: frozenset[str] = frozenset(
    {
        "args_get",
        "args_sizes_get",
        "environ_get",
        "environ_sizes_get",
        "clock_res_get",
        "clock_time_get",
        "fd_advise",
        "fd_allocate",
        "fd_close",
        "fd_datasync",
        "fd_fdstat_get",
        "fd_fdstat_set_flags",
        "fd_fdstat_set_rights",
        "fd_filestat_get",
        "fd_filestat_set_size",
        "fd_filestat_set_times",
        "fd_pread",
        "fd_prestat_get",
        "fd_prestat_dir_name",
        "fd_pwrite",
        "fd_read",
        "fd_readdir",
        "fd_renumber",
        "fd_seek",
        "fd_sync",
        "fd_tell",
        "fd_write",
        "path_create_directory",
        "path_filestat_get",
        "path_filestat_set_times",
        "path_link",
        "path_open",
        "path_readlink",
        "path_remove_directory",
        "path_rename",
        "path_symlink",
        "path_unlink_file",
        "poll_oneoff",
        "proc_exit",
        "proc_raise",
        "sched_yield",
        "random_get",
        "sock_accept",
        "sock_recv",
        "sock_send",
        "sock_shutdown",
    }
)

_EBADF, _EFAULT, _EINVAL, _ENOSYS, _ENOTSUP = 8, 21, 28, 52, 58
_SUB = struct.Struct("<QB7xIxxxxQQH6x")  # userdata, tag, clock id, timeout, precision, flags
_SUB_SIZE = 48
_EVENT = struct.Struct("<QHBxxxxxQH6x")  # userdata, error, type, nbytes, flags
_MAX_SUBSCRIPTIONS = 64
_I32 = wasmtime.ValType.i32()

Sink = Callable[[bytes], None]
DeadlineOf = Callable[[], "tuple[float, Callable[[], None]] | None"]


def restricted_wasi_config(stdout: Sink, stderr: Sink) -> wasmtime.WasiConfig:
    """Return a ``WasiConfig`` with nothing but captured stdout/stderr."""
    cfg = wasmtime.WasiConfig()
    cfg.stdout_custom = stdout
    cfg.stderr_custom = stderr
    return cfg


def define_restricted_wasi(
    linker: wasmtime.Linker, keeper: CallbackKeeper, deadline_of: DeadlineOf, tick_s: float
) -> None:
    """Define WASI preview1 on ``linker`` with the blocking and network calls shadowed.

    ``deadline_of()`` returns ``(absolute time.monotonic() deadline, on_slept_past)`` for the
    request running on this thread, or ``None`` for no deadline.
    """
    linker.define_wasi()
    linker.allow_shadowing = True

    for name, errno, arity in (
        ("sock_accept", _ENOTSUP, 3),
        ("sock_recv", _ENOTSUP, 6),
        ("sock_send", _ENOTSUP, 5),
        ("sock_shutdown", _ENOTSUP, 2),
        ("proc_raise", _ENOSYS, 1),
        ("sched_yield", 0, 0),
    ):
        define_raw(linker, keeper, WASI_MODULE, name, (arity, 1), _returns(errno))

    def poll_oneoff(caller: Any, in_ptr: int, out_ptr: int, nsubs: int, nev: int) -> int:
        try:
            mem = caller_memory(caller)
            return _poll(mem, in_ptr, out_ptr, nsubs, nev, deadline_of(), tick_s)
        except (GuestPointerError, MissingMemoryError):
            return _EFAULT
        except Exception:
            return _EINVAL  # never raise into wasm (see rawcall)

    define_raw(linker, keeper, WASI_MODULE, "poll_oneoff", (4, 1), poll_oneoff, error=_EINVAL)
    linker.allow_shadowing = False


def _returns(errno: int) -> Callable[..., int]:
    def stub(*_args: int) -> int:
        return errno

    return stub


def _now_ns(clock_id: int) -> int:
    return time.time_ns() if clock_id == 0 else time.monotonic_ns()


def _poll(  # noqa: PLR0917 - wasm ABI argument order
    mem: GuestMemory,
    in_ptr: int,
    out_ptr: int,
    nsubs: int,
    nevents_ptr: int,
    deadline: tuple[float, Callable[[], None]] | None,
    tick_s: float,
) -> int:
    nsubs &= 0xFFFF_FFFF
    if nsubs == 0 or nsubs > _MAX_SUBSCRIPTIONS:
        return _EINVAL
    raw = mem.read(in_ptr, nsubs * _SUB_SIZE)
    mem.check(out_ptr, nsubs * _EVENT.size)
    mem.check(nevents_ptr, 4)
    subs = [_SUB.unpack_from(raw, i * _SUB_SIZE) for i in range(nsubs)]
    events = [
        _EVENT.pack(ud, 0 if fd_like_ok(tag, clk) else _EBADF, tag, 0, 0)
        for ud, tag, clk, *_ in subs
        if tag != 0
    ]
    if not events:
        waits = [_relative_ns(clk, timeout, flags) for _, tag, clk, timeout, _, flags in subs]
        wait_ns = min(waits)
        _sleep(wait_ns / 1e9, deadline, tick_s)
        events = [
            _EVENT.pack(ud, 0, 0, 0, 0)
            for (ud, *_), w in zip(subs, waits, strict=True)
            if w <= wait_ns
        ]
    mem.write(out_ptr, b"".join(events))
    mem.put_u32(nevents_ptr, len(events))
    return 0


def fd_like_ok(tag: int, fd: int) -> bool:
    """An fd_write subscription on stdout/stderr is ready; anything else is EBADF."""
    return tag == 2 and fd in (1, 2)


def _relative_ns(clock_id: int, timeout: int, flags: int) -> int:
    if flags & 1:  # subscription_clock_abstime
        return max(0, timeout - _now_ns(clock_id))
    return timeout


def _sleep(
    seconds: float, deadline: tuple[float, Callable[[], None]] | None, tick_s: float
) -> None:
    if deadline is not None:
        at, on_slept_past = deadline
        left = at - time.monotonic()
        if seconds > left:
            on_slept_past()
            # Two ticks past the deadline: the epoch check traps when the guest resumes.
            seconds = max(0.0, left) + 2 * tick_s
    if seconds > 0:
        time.sleep(seconds)

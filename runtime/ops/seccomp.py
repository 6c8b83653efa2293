"""A seccomp filter that refuses a worker the system calls it never makes (EPERM).

A worker serves requests; it never traces or reads another process's memory, makes
namespaces, mounts, loads kernel code, uses keyrings, io_uring, userfaultfd, eBPF or perf
events. Those calls are much of the kernel's attack surface for a process that a hostile
request took over, and the systemd unit's ``SystemCallFilter=@system-service`` (the whole
service's) allows several of them. The filter is a classic BPF program (`seccomp(2)`) of
the calls by number, for x86-64 and arm64 (the targets); on another architecture nothing is
filtered. Any other architecture's calls (i386 or x32 on x86-64) are refused outright.

Like Landlock, it acts on the calling thread and what it starts later: install it while the
process has one thread. It needs ``PR_SET_NO_NEW_PRIVS`` (`landlock.no_new_privs`) first.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

__all__ = ["DENIED", "deny", "numbers"]

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "swapon", "swapoff",
    "reboot", "acct", "quotactl", "name_to_handle_at", "open_by_handle_at",
)  # fmt: skip
# Numbers from <asm/unistd_64.h> (x86-64) and <asm-generic/unistd.h> (arm64), in DENIED's
# order; tests/runtime/ops/test_seccomp.py checks them against the headers where present.
_X86_64 = (101, 310, 311, 438, 312, 272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432,
           433, 442, 246, 320, 175, 313, 176, 250, 248, 249, 321, 298, 323, 425, 426, 427,
           167, 168, 169, 163, 179, 303, 304)  # fmt: skip
_ARM64 = (117, 270, 271, 438, 272, 97, 268, 40, 39, 41, 51, 428, 429, 430, 431, 432, 433,
          442, 104, 294, 105, 273, 106, 219, 217, 218, 280, 241, 282, 425, 426, 427, 224,
          225, 142, 89, 60, 264, 265)  # fmt: skip
_ARCHES = {"x86_64": (0xC000003E, _X86_64), "aarch64": (0xC00000B7, _ARM64)}
_X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]  # fmt: skip


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def numbers(machine: str) -> dict[str, int]:
    """The denied calls' numbers on ``machine`` (`platform.machine`); empty if unknown."""
    known = _ARCHES.get(machine)
    return dict(zip(DENIED, known[1], strict=True)) if known else {}


def deny() -> bool:
    """Install the filter on this thread; False on an architecture it has no numbers for."""
    known = _ARCHES.get(platform.machine())
    if known is None:
        return False
    arch, calls = known
    refuse = _RET_ERRNO | errno.EPERM
    program = [
        _Insn(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _Insn(_JEQ_K, 1, 0, arch),
        _Insn(_RET_K, 0, 0, refuse),
        _Insn(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        _Insn(_JGE_K, len(calls) + 1, 0, _X32_BIT),  # x32 calls: to the refusal at the end
        *(_Insn(_JEQ_K, len(calls) - i, 0, nr) for i, nr in enumerate(calls)),
        _Insn(_RET_K, 0, 0, _RET_ALLOW),
        _Insn(_RET_K, 0, 0, refuse),
    ]
    insns = (_Insn * len(program))(*program)
    prog = _Prog(len(program), insns)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"seccomp filter: {os.strerror(code)}")
    return True

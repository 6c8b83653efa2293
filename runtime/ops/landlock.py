"""The kernel's confinement calls (Landlock, ``prctl``, ``capset``) over ctypes, in one place.

Landlock (Linux 5.13+, `docs.kernel.org/userspace-api/landlock.html`) lets a process give up
filesystem access for itself and its future children: it names what it handles, adds a rule
per directory or file it keeps, and restricts itself; every later ``open`` outside the rules
fails with EACCES, whatever the file's owner and mode, and symlinks, ``..`` and
``/proc/<pid>/root`` are judged by the file they reach. Each ABI version adds rights; a kernel
older than one of them neither handles nor grants them (`Rules.handled`).

Everything here acts on the calling thread only: call it while the process has one thread,
and every later thread and child inherits it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CODE",
    "DEVICE",
    "DIR_READ",
    "DIR_WRITE",
    "FILE_READ",
    "FILE_WRITE",
    "Rules",
    "abi_version",
    "drop_capabilities",
    "no_new_privs",
]

# Filesystem rights (LANDLOCK_ACCESS_FS_*), with the ABI version that introduced each.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: REFER, 3: TRUNCATE, 5: IOCTL_DEV}
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a file (not a directory) may carry."""

FILE_READ = READ_FILE
FILE_WRITE = READ_FILE | WRITE_FILE | TRUNCATE
DIR_READ = READ_FILE | READ_DIR
CODE = DIR_READ | EXECUTE
DEVICE = FILE_WRITE | READ_DIR | IOCTL_DEV
DIR_WRITE = ((1 << 16) - 1) & ~(EXECUTE | MAKE_CHAR | MAKE_BLOCK | IOCTL_DEV)
"""Everything a program does in a directory of its own but run what it wrote or make
device nodes."""

_BIND_TCP = 1 << 0  # LANDLOCK_ACCESS_NET_BIND_TCP, ABI 4
_SCOPES = (1 << 0) | (1 << 1)  # abstract Unix sockets and signals outside the domain, ABI 6

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT = 38, 24, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522


class _RulesetAttr(ctypes.Structure):
    # Sent whole to every kernel: an older one accepts the fields it lacks while they are 0.
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (too old, or not enabled at boot)."""
    result = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return int(result) if result > 0 else 0


@dataclass
class Rules:
    """The paths this process keeps, each with its rights (absent paths are skipped)."""

    abi: int
    paths: dict[Path, int] = field(default_factory=dict)
    binds: set[int] = field(default_factory=set)
    """TCP ports it may still bind (ABI 4+); 0 is any ephemeral port (a client socket
    bound before it connects: paho binds every connection to ("", 0))."""

    @property
    def handled(self) -> int:
        return sum(bit for version, bit in _FS_BY_ABI.items() if version <= self.abi)

    def allow(self, path: Path, rights: int) -> None:
        self.paths[path] = self.paths.get(path, 0) | rights

    def allow_bind(self, port: int) -> None:
        self.binds.add(port)

    def restrict(self) -> None:
        """Restrict the calling thread (and what it starts) to the rules; NoNewPrivs first."""
        libc = _libc()
        attr = _RulesetAttr(
            self.handled,
            _BIND_TCP if self.abi >= 4 else 0,
            _SCOPES if self.abi >= 6 else 0,
        )
        size = ctypes.c_size_t(ctypes.sizeof(attr))
        fd = _check(libc.syscall(_CREATE_RULESET, ctypes.byref(attr), size, 0), "landlock")
        try:
            for path, rights in self.paths.items():
                self._add(libc, fd, path, rights)
            for port in sorted(self.binds) if self.abi >= 4 else ():
                rule = _NetPort(_BIND_TCP, port)
                call = libc.syscall(_ADD_RULE, fd, _RULE_NET_PORT, ctypes.byref(rule), 0)
                _check(call, f"landlock rule for TCP port {port}")
            no_new_privs()
            _check(libc.syscall(_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
        finally:
            os.close(fd)

    def _add(self, libc: ctypes.CDLL, ruleset: int, path: Path, rights: int) -> None:
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if not stat.S_ISDIR(os.fstat(target).st_mode):
                rights &= _FILE_ONLY
            rule = _PathBeneath(rights & self.handled, target)
            call = libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            _check(call, f"landlock rule for {path}")
        finally:
            os.close(target)


def no_new_privs() -> None:
    """No ``execve`` of this thread or its children gains privileges (setuid, file caps)."""
    _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def drop_capabilities() -> None:
    """Give up every capability for good: the bounding set (so no ``execve`` brings one
    back, not even as root), the ambient set, then the effective, permitted and inheritable
    sets. A process holding none only clears its (empty) ambient set."""
    libc = _libc()
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    if not any(d.permitted for d in data):
        return
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"PR_CAPBSET_DROP {cap}")
    _check(libc.capset(ctypes.byref(header), (_CapData * 2)()), "capset")

"""Run a command as root in a Debian root of either architecture, without touching the host.

    python3 tests/deploy/debroot.py --root DIR [--upper DIR] [--qemu PATH] [--cpuinfo FILE]
        [--setenv NAME=VALUE]... -- COMMAND...

The command runs chrooted, as uid 0, inside a private user, mount and PID namespace that
maps every host uid and gid to itself (so dpkg's chowns and apt's ``_apt`` user work):

- ``--upper DIR``: the root is an overlay, ``--root`` read-only below (repeat ``--root`` to
  stack earlier uppers, newest first), writes go to DIR. A cached clean root stays clean and
  a test's changes are exactly the files in DIR.
- a fresh ``/proc`` (the namespace's own PIDs), ``/sys`` and ``/dev`` bound from the host;
  ``--cpuinfo FILE`` is bound over ``/proc/cpuinfo`` (ONNX Runtime's cpuinfo reads it and an
  x86 one under an emulated arm64 CPU makes it crash).
- ``--qemu PATH``: registers PATH (qemu-aarch64-static) for arm64 ELF files in this
  namespace's own binfmt_misc (Linux >= 6.7 gives each user namespace one), so dpkg,
  maintainer scripts and the daemon of an arm64 root run emulated. The host's binfmt
  handlers are never changed.
- the environment is emptied: PATH, HOME, LANG and each ``--setenv``.

Every mount disappears with the namespace. SIGTERM, SIGINT and SIGHUP reach the command;
killing this process kills everything in the namespace. Exit status is the command's.

Only the standard library: `.ci/deb-setup` runs it as a script (debootstrap's second stage)
and tests/deploy/test_deb.py runs it as a subprocess. Needs real root on the host.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# The arm64 ELF magic and mask of Debian's qemu-user-static binfmt entry; F: the kernel opens
# the emulator now, so it need not exist inside the root.
AARCH64_BINFMT = (
    r":qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
    r":\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:{qemu}:F"
)
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: Path, fstype: str | None, flags: int, data: str = "") -> None:
    result = _libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() or None,
    )
    _check(result, f"mount {source} on {target}")


def _die_with_parent() -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")


def _forward_and_wait(pid: int) -> int:
    """Pass the forwarded signals to ``pid``; its exit status as a shell would report it."""

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    _, status = os.waitpid(pid, 0)  # EINTR is retried by Python (PEP 475)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 128 + os.WTERMSIG(status)


def _child(body: Callable[[], object]) -> NoReturn:
    """Run a forked child's part: never return into the parent's code, even on an error."""
    try:
        body()
    except BaseException as e:
        print(f"debroot: {e}", file=sys.stderr)
        os._exit(125)
    os._exit(0)


def _write_id_maps(pid: int) -> None:
    """Identity maps for every id: written by the parent, which is root on the host."""
    for name in ("uid_map", "gid_map"):
        Path(f"/proc/{pid}/{name}").write_text("0 0 4294967295\n")


def _prepare_root(args: argparse.Namespace) -> Path:
    """Mount the root (overlay or in place) with /proc, /sys, /dev; return its path."""
    _mount("none", Path("/"), None, MS_REC | MS_PRIVATE)
    if args.upper is None:
        merged = Path(args.root[0])
        _mount(str(merged), merged, None, MS_BIND | MS_REC)
    else:
        upper = Path(args.upper)
        work, merged = upper.with_name(upper.name + ".work"), upper.with_name(upper.name + ".mnt")
        for d in (upper, work, merged):
            d.mkdir(parents=True, exist_ok=True)
        lower = ":".join(str(Path(r)) for r in args.root)
        # userxattr: the overlay's own bookkeeping in user.* xattrs, as a user namespace needs.
        opts = f"lowerdir={lower},upperdir={upper},workdir={work},userxattr"
        _mount("overlay", merged, "overlay", 0, opts)
    _mount("proc", merged / "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for sub in ("sys", "dev"):
        _mount(f"/{sub}", merged / sub, None, MS_BIND | MS_REC)
    if args.cpuinfo:
        _mount(args.cpuinfo, merged / "proc" / "cpuinfo", None, MS_BIND)
    if args.qemu:
        binfmt = merged / "proc" / "sys" / "fs" / "binfmt_misc"
        try:
            _mount("binfmt_misc", binfmt, "binfmt_misc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except PermissionError as e:
            raise OSError(e.errno, "binfmt_misc in a user namespace needs Linux >= 6.7") from e
        # Written as text: the kernel decodes the backslash escapes itself.
        (binfmt / "register").write_text(AARCH64_BINFMT.format(qemu=args.qemu))
    return merged


def _run_command(merged: Path, args: argparse.Namespace) -> NoReturn:
    if args.no_chroot:  # a host tool that takes the root as a path (DEBROOT in its environment)
        env = {**os.environ, "DEBROOT": str(merged)}
        os.execvpe(args.command[0], args.command, env)  # noqa: S606 - runs the given command
    os.chroot(merged)
    os.chdir("/")
    env = {"PATH": CLEAN_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    env.update(kv.split("=", 1) for kv in args.setenv)
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    os.execvpe(args.command[0], args.command, env)  # noqa: S606 - runs the given command


def _init(args: argparse.Namespace) -> NoReturn:
    """PID 1 of the namespace: mount, start the command as PID 2, pass signals, reap."""
    _die_with_parent()
    merged = _prepare_root(args)
    pid = os.fork()
    if pid == 0:
        _child(lambda: _run_command(merged, args))
    os._exit(_forward_and_wait(pid))


def _namespace_owner(args: argparse.Namespace, ready: int, go: int) -> NoReturn:
    _die_with_parent()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare user+mount")
    os.write(ready, b".")
    os.read(go, 1)  # the parent has written the id maps: now uid 0 here is root on the host
    _check(_libc.unshare(CLONE_NEWPID), "unshare pid")
    pid = os.fork()
    if pid == 0:
        _child(lambda: _init(args))
    os._exit(_forward_and_wait(pid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", action="append", required=True)
    parser.add_argument("--upper")
    parser.add_argument("--qemu")
    parser.add_argument("--cpuinfo")
    parser.add_argument("--setenv", action="append", default=[])
    parser.add_argument("--no-chroot", action="store_true")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (it mounts and writes identity uid maps)")
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(lambda: _namespace_owner(args, ready_w, go_r))
    if not os.read(ready_r, 1):
        return 1  # the child failed before unsharing; it printed why
    _write_id_maps(pid)
    os.write(go_w, b".")
    return _forward_and_wait(pid)


if __name__ == "__main__":
    sys.exit(main())

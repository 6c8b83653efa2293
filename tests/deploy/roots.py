"""Clean Debian 12 roots for the package tests: overlays of the roots `.ci/deb-setup` caches,
commands run inside them as root (tests/deploy/debroot.py), and the docs' table of files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEBROOT = Path(__file__).with_name("debroot.py")
DEPLOY_DOC = REPO / "docs" / "deploy.md"
ARCHES = ("amd64", "arm64")
ENV_VARS = (
    "WASMGATE_DEB_ROOT_AMD64",
    "WASMGATE_DEB_ROOT_ARM64",
    "WASMGATE_DEB_WHEELS",
    "WASMGATE_DEB_QEMU",
    "WASMGATE_DEB_VENV_DEBS_AMD64",
)
# A Raspberry Pi 5 (Cortex-A76) for the emulated arm64 CPU: ONNX Runtime's cpuinfo reads the
# file and an x86 one under an arm64 CPU makes it crash (see tests/runtime/test_arm64.py).
PI5_CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
    "crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\n"
    "CPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n"
    for i in range(4)
)
# No systemd runs in a chroot. This systemctl records every call; what needs a running systemd
# (daemon-reload, start, stop, is-active) it only records, what works on the files alone
# (preset, enable, is-enabled: deb-systemd-helper's first enable) the real one does; of
# `enable --now` / `disable --now` (the docs' venv install) it does the file part.
SYSTEMCTL_STUB = """#!/bin/sh
echo "$*" >> /run/systemctl.log
case "$*" in
  *--now*) exec /usr/bin/systemctl.real $(echo "$*" | sed 's/ *--now//') ;;
  *daemon-reload*|*start*|*stop*) exit 0 ;;
  *is-active*) exit 3 ;;
esac
exec /usr/bin/systemctl.real "$@"
"""


def deb_env() -> dict[str, str]:
    """What `.ci/deb-setup` printed: exported by `.ci/run`, else its cached ``env`` file."""
    if all(name in os.environ for name in ENV_VARS):
        return {name: os.environ[name] for name in ENV_VARS}
    tests_cache = Path(os.environ.get("WASMGATE_TEST_CACHE", "~/.cache/wasmgate-tests"))
    cache = Path(os.environ.get("WASMGATE_DEB_CACHE", tests_cache / "deb")).expanduser()
    saved = cache / "env"
    if not saved.is_file():
        pytest.fail("no Debian roots: run .ci/deb-setup once (.ci/run does it before the tests)")
    env = dict(line.split("=", 1) for line in saved.read_text().splitlines() if "=" in line)
    for name in ENV_VARS:
        assert name in env, f"{saved} lacks {name}: run .ci/deb-setup again"
    return env


@dataclass(frozen=True)
class Root:
    """A Debian root seen through an overlay: ``lowers`` (the clean root last) stay as they
    are, every change lands in ``upper``."""

    arch: str
    lowers: tuple[Path, ...]
    upper: Path
    qemu: str

    @classmethod
    def clean(cls, arch: str, upper: Path) -> Root:
        env = deb_env()
        base = Path(env[f"WASMGATE_DEB_ROOT_{arch.upper()}"])
        assert (base / ".done").exists(), f"{base} is incomplete: run .ci/deb-setup again"
        return cls(arch, (base,), upper, env["WASMGATE_DEB_QEMU"])

    def fork(self, upper: Path) -> Root:
        """A new overlay on top of this one as it is now."""
        self.upper.mkdir(parents=True, exist_ok=True)
        return Root(self.arch, (self.upper, *self.lowers), upper, self.qemu)

    def argv(
        self, command: list[str], env: dict[str, str] | None = None, *, chroot: bool = True
    ) -> list[str]:
        """``command`` in the root; with ``chroot=False`` a host tool given the root's path in
        $DEBROOT (systemd-analyze --root)."""
        self.upper.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(DEBROOT), "--upper", str(self.upper)]
        if not chroot:
            cmd.append("--no-chroot")
        cmd += [f"--root={lower}" for lower in self.lowers]
        if self.arch == "arm64":
            cpuinfo = self.upper.with_name("cpuinfo")
            cpuinfo.write_text(PI5_CPUINFO)
            cmd += ["--qemu", self.qemu, "--cpuinfo", str(cpuinfo), "--setenv=QEMU_CPU=cortex-a76"]
        cmd += [f"--setenv={k}={v}" for k, v in (env or {}).items()]
        return [*cmd, "--", *command]

    def sh(self, script: str, *, answer: str = "", timeout: float = 900) -> str:
        """Run ``script`` with /bin/sh -e in the root, ``answer`` on its stdin; its stdout
        (a failure shows stderr too)."""
        proc = subprocess.run(
            self.argv(["/bin/sh", "-ec", script]),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            input=answer,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"in the {self.arch} root, exit {proc.returncode}: {script}\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc.stdout

    def paths(self) -> set[str]:
        """Every path in the root's own file system (not /proc, /sys, /dev)."""
        return set(self.sh("find / -xdev").splitlines())

    def record_systemctl(self, *, running: bool) -> None:
        """`systemctl` records its calls (SYSTEMCTL_STUB; in place of the real one, as apt runs
        dpkg with PATH=/usr/sbin:/usr/bin:/sbin:/bin); ``running``: /run/systemd/system
        exists, as where systemd booted the machine."""
        real = "/usr/bin/systemctl.real"
        self.sh(
            f"touch /run/systemctl.log && {{ [ -e {real} ] || mv /usr/bin/systemctl {real}; }} && "
            f"cat > /usr/bin/systemctl <<'EOF'\n{SYSTEMCTL_STUB}EOF\n"
            "chmod 755 /usr/bin/systemctl" + (" && mkdir -p /run/systemd/system" if running else "")
        )

    def systemctl_calls(self) -> list[str]:
        return self.sh("cat /run/systemctl.log 2>/dev/null || true").splitlines()


def canonical(path: str) -> str:
    """Debian 12 roots merge /usr: /lib, /bin and /sbin are links into /usr."""
    return re.sub(r"^/(lib|bin|sbin)/", r"/usr/\1/", path)


@dataclass(frozen=True)
class Row:
    paths: tuple[str, ...]
    after_remove: str
    after_purge: str


def file_table() -> list[Row]:
    """docs/deploy.md's table: path(s) | what | after `apt remove` | after `apt purge`."""
    rows = []
    for line in DEPLOY_DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[2] in {"kept", "removed"}:
            paths = tuple(canonical(p) for p in re.findall(r"`(/[^`]+)`", cells[0]))
            rows.append(Row(paths, cells[2], cells[3]))
    assert len(rows) >= 6, "docs/deploy.md: the package's file table is missing"
    return rows


def doc_commands(prefix: str) -> list[str]:
    """docs/deploy.md's command lines (code blocks) that start with ``prefix``, comments cut,
    each once (the install line is also the upgrade's)."""
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    found = re.findall(rf"^({re.escape(prefix)}.*?)\s*(?:#.*)?$", text, re.MULTILINE)
    return list(dict.fromkeys(found))


def doc_inline(prefix: str) -> list[str]:
    """docs/deploy.md's inline code that starts with ``prefix``."""
    return re.findall(rf"`({re.escape(prefix)}[^`]*)`", DEPLOY_DOC.read_text(encoding="utf-8"))


def under(path: str, roots: set[str] | tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

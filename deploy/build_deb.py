"""Build ``wasmgate_<version>_<arch>.deb`` (amd64, arm64) from the wasmgate wheel.

    deploy/build-deb [--arch amd64|arm64]... [--wheel FILE] [--out DIR] [--offline] ...

What the package holds (docs/deploy.md describes it for operators):

- ``/opt/wasmgate``: a self-contained environment, never the system Python's site-packages:
  the wheel and its runtime dependencies in ``lib/python3.11/site-packages``, ``bin/python3.11``
  -> Debian's ``/usr/bin/python3.11`` (``Depends: python3.11``), ``pyvenv.cfg``, the
  ``wasmgate`` script and byte code compiled now (the service cannot write there).
- ``/usr/bin/wasmgate`` -> ``/opt/wasmgate/bin/wasmgate``; the systemd unit that
  ``wasmgate serve --print-unit`` prints from there, in ``/lib/systemd/system``;
  ``/etc/wasmgate/config.toml`` (commented) and an empty ``trust.json``, both conffiles.
- maintainer scripts (deploy/deb/): enable and start the unit the way debhelper does, guarded
  for chroots without systemd; purge removes config, state and caches.

How an arm64 package is built on an x86 host without running arm64 code: pip installs the
target's manylinux wheels into the tree (``--platform``, ``--python-version``: every dependency
ships them for both architectures), the venv's files are written here rather than by
``python -m venv``, and the byte code is compiled by a host Python of the same version (the
format depends only on the version). dpkg then owns every file, installing runs no pip and
needs no network, and what CI tests is exactly what is shipped.

The daemon set, not the authoring toolchain: EXCLUDED dependencies are left out even while
the wheel still requires them (today ``ziglang``, the adapter authors' compiler).
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.debian import build_tree
from deploy.debtree import ARCHES, Target, wheel_metadata

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path("~/.cache/wasmgate-deb").expanduser()


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="deploy/build-deb",
        description="Build wasmgate_<version>_<arch>.deb from the wasmgate wheel.",
    )
    parser.add_argument(
        "--arch",
        action="append",
        choices=sorted(ARCHES),
        help="Debian architecture (repeatable; default: this machine's)",
    )
    parser.add_argument("--wheel", type=Path, help="the wasmgate wheel (default: build one)")
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the .deb goes")
    parser.add_argument(
        "--python-version",
        default="3.11",
        help="the target's python3 (Debian 12: 3.11, Ubuntu 22.04: 3.10)",
    )
    parser.add_argument(
        "--glibc", default="2.36", help="the target's glibc: newest manylinux wheels accepted"
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        help=f"wheel cache, every arch (default {DEFAULT_CACHE}/wheels-cpXY)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="download nothing: every wheel must be in the wheelhouse",
    )
    parser.add_argument(
        "--download-only",
        action="store_true",
        help="only fill the wheelhouse (for an --offline build later)",
    )
    # zstd (dpkg >= 1.21.18: Debian 12, Ubuntu 22.04): 129 MB, packed in 3 s and unpacked in
    # seconds on a Pi; xz: 96 MB but ~9 min to pack on 2 cores (measured with 0.1.0, amd64).
    parser.add_argument("--compression", default="zstd", choices=["zstd", "xz", "gzip", "none"])
    return parser.parse_args(argv)


def host_arch() -> str:
    out = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() if out.returncode == 0 else "amd64"


def build_wheel(into: Path, *, offline: bool) -> Path:
    """This checkout's wheel (``python -m build``; offline with this Python's setuptools)."""
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(into), str(REPO)]
    if offline:
        cmd.insert(4, "--no-isolation")
    print(f"build-deb: building the wheel: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    (wheel,) = into.glob("wasmgate-*.whl")
    return wheel


def _check(args: argparse.Namespace) -> str | None:
    """The first reason this build cannot work, in one line (None: go ahead)."""
    if args.wheel is not None and not args.wheel.is_file():
        return f"--wheel {args.wheel}: no such file"
    if not re.fullmatch(r"3\.\d+", args.python_version):
        return f"--python-version {args.python_version}: expected 3.N"
    if not re.fullmatch(r"2\.\d+", args.glibc):
        return f"--glibc {args.glibc}: expected 2.N"
    for tool, package in (("dpkg-deb", "dpkg"), ("readelf", "binutils")):
        if not args.download_only and shutil.which(tool) is None:
            return f"{tool} not found: apt install {package}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if (problem := _check(args)) is not None:
        print(f"build-deb: {problem}", file=sys.stderr)
        return 2
    try:
        _build(args)
    except subprocess.CalledProcessError as e:
        step = shlex.join(map(str, e.cmd[:5]))
        print(f"build-deb: {step} ... failed (exit {e.returncode}), see above", file=sys.stderr)
        return 1
    return 0


def _build(args: argparse.Namespace) -> None:
    pyver = args.python_version
    with tempfile.TemporaryDirectory(prefix="wasmgate-deb-") as tmp:
        wheel = args.wheel or build_wheel(Path(tmp), offline=args.offline)
        meta = wheel_metadata(wheel)
        for arch in args.arch or [host_arch()]:
            tag = f"cp{pyver.replace('.', '')}"
            target = Target(arch, pyver, args.glibc)
            house = args.wheelhouse or DEFAULT_CACHE / f"wheels-{tag}"
            if not args.offline:
                target.download(meta.requirements(target), house)
            if args.download_only:
                continue
            stage = Path(tmp) / f"stage-{arch}"
            build_tree(stage, wheel, meta, target, house=house, deb=REPO / "deploy" / "deb")
            out = args.out / f"wasmgate_{meta.debian_version}_{arch}.deb"
            out.parent.mkdir(parents=True, exist_ok=True)
            cmd = ["dpkg-deb", "--root-owner-group", f"-Z{args.compression}", "--build"]
            subprocess.run([*cmd, str(stage), str(out)], check=True, stdout=subprocess.DEVNULL)
            shutil.rmtree(stage)
            print(out)


if __name__ == "__main__":
    sys.exit(main())

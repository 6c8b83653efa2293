"""The package's file tree: the environment under /opt/wasmgate, built for another machine.

Nothing here runs code of the target architecture: pip picks the target's wheels
(`Target.pip_args`), the venv's few files are written directly (`write_venv`) and the byte
code comes from a host Python of the target's version (`compile_tree`).
"""

from __future__ import annotations

import configparser
import email.parser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment  # what `build` runs on too
from packaging.requirements import Requirement

ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}
PREFIX = Path("/opt/wasmgate")
# Left out of the package even while the wheel requires them: only adapter authors run them.
EXCLUDED = {"ziglang": "the adapter authors' C compiler (411 MB); the daemon never runs it"}
# The oldest glibc manylinux tags name (manylinux2014 = 2.17).
_OLDEST_GLIBC = 17


@dataclass(frozen=True)
class Target:
    """The machine the package is for: Debian architecture, its python3 and glibc."""

    arch: str
    python: str
    glibc: str

    @property
    def machine(self) -> str:
        return ARCHES[self.arch]

    def pip_args(self) -> list[str]:
        """Only wheels that run there: its CPU, CPython version and glibc (or older)."""
        newest = int(self.glibc.split(".")[1])
        tags = [f"manylinux_2_{m}_{self.machine}" for m in range(newest, _OLDEST_GLIBC - 1, -1)]
        tags.append(f"manylinux2014_{self.machine}")
        platforms = [f"--platform={t}" for t in tags]
        version = ["--implementation=cp", f"--python-version={self.python}"]
        return ["--only-binary=:all:", *version, *platforms, "--quiet"]

    def markers(self) -> dict[str, str]:
        """The environment markers of a CPython on the target (for Requires-Dist)."""
        env = {k: str(v) for k, v in default_environment().items()}
        env.update(platform_machine=self.machine, platform_system="Linux", sys_platform="linux")
        env.update(python_version=self.python, python_full_version=f"{self.python}.0")
        env.update(implementation_name="cpython", platform_python_implementation="CPython")
        return env

    def download(self, requirements: list[str], wheelhouse: Path) -> None:
        wheelhouse.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--dest", str(wheelhouse)]
        print(f"build-deb: {self.arch} wheels into {wheelhouse}", file=sys.stderr)
        subprocess.run([*pip, *self.pip_args(), *requirements], check=True)

    def install(self, what: list[str], site: Path, wheelhouse: Path, *, deps: bool) -> None:
        """Install from the wheelhouse only (--isolated: no index or links from pip's config)."""
        pip = [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "install",
            "--target",
            str(site),
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--no-compile",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--no-warn-conflicts",
        ]
        if not deps:
            pip.append("--no-deps")
        subprocess.run([*pip, *self.pip_args(), *what], check=True)


@dataclass(frozen=True)
class WheelMeta:
    """What the package takes from the wheel's METADATA and entry points."""

    name: str
    version: str
    summary: str
    license: str
    requires: tuple[str, ...]
    scripts: dict[str, str]

    def requirements(self, target: Target) -> list[str]:
        """The runtime requirements that apply on the target, minus EXCLUDED."""
        env = {**target.markers(), "extra": ""}
        kept = []
        for line in self.requires:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if req.name in EXCLUDED:
                print(f"build-deb: leaving out {req.name}: {EXCLUDED[req.name]}", file=sys.stderr)
                continue
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            kept.append(f"{req.name}{extras}{req.specifier}")  # the marker: evaluated above
        return kept

    @property
    def debian_version(self) -> str:
        """PEP 440 to Debian ordering: 1.0rc1 and 1.0.dev2 sort before 1.0 (``~``). The local
        part (``+g<commit>``, setuptools-scm's) is kept as it is: it only names the build."""
        public, plus, local = self.version.partition("+")
        public = re.sub(r"(\d)\.?(a|b|rc)(\d+)", r"\1~\2\3", public)
        return re.sub(r"\.?(dev\d+)", r"~\1", public) + plus + local


def wheel_metadata(wheel: Path) -> WheelMeta:
    with zipfile.ZipFile(wheel) as zf:
        info = next(n.split("/")[0] for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.BytesParser().parsebytes(zf.read(f"{info}/METADATA"))
        points = configparser.ConfigParser()
        if f"{info}/entry_points.txt" in zf.namelist():
            points.read_string(zf.read(f"{info}/entry_points.txt").decode())
    scripts = dict(points["console_scripts"]) if points.has_section("console_scripts") else {}
    return WheelMeta(
        name=meta["Name"],
        version=meta["Version"],
        summary=meta["Summary"] or "",
        license=meta["License-Expression"] or meta["License"] or "see the project",
        requires=tuple(meta.get_all("Requires-Dist") or ()),
        scripts=scripts,
    )


def site_packages(env: Path, python: str) -> Path:
    return env / "lib" / f"python{python}" / "site-packages"


def write_venv(env: Path, meta: WheelMeta, python: str) -> None:
    """What ``python -m venv`` would write for Debian's /usr/bin/pythonX.Y, plus the scripts."""
    bindir = env / "bin"
    shutil.rmtree(bindir, ignore_errors=True)
    bindir.mkdir(parents=True)
    (bindir / f"python{python}").symlink_to(f"/usr/bin/python{python}")
    for alias in ("python3", "python"):
        (bindir / alias).symlink_to(f"python{python}")
    (env / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {python}\n"
    )
    for name, entry in meta.scripts.items():
        module, _, func = entry.partition(":")
        script = bindir / name
        script.write_text(
            f"#!{PREFIX}/bin/python{python}\nimport sys\nfrom {module} import {func}\n\n"
            f'if __name__ == "__main__":\n    sys.exit({func}())\n'
        )
        script.chmod(0o755)


def compile_tree(stage: Path, site: Path, python: str) -> None:
    """Byte code for every module, as the service cannot write it (ProtectSystem=strict).

    unchecked-hash: valid whatever the files' mtimes (dpkg-deb clamps them to
    SOURCE_DATE_EPOCH); dpkg owns the sources, so an edited one is a damaged package."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = sys.executable if here == python else shutil.which(f"python{python}")
    if interpreter is None:
        sys.exit(f"build-deb: no python{python} here to compile the byte code with")
    cmd = [
        interpreter,
        "-m",
        "compileall",
        "-q",
        "-j",
        "0",
        "--invalidation-mode",
        "unchecked-hash",
        "-s",
        str(stage),
        "-p",
        "/",
        str(site),
    ]
    if subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL).returncode != 0:
        print("build-deb: some files did not compile (left as source)", file=sys.stderr)


def render_unit(site: Path, exec_path: str) -> str:
    """The unit text from the wheel's own template (a stdlib-only module), for exec_path."""
    path = site / "wasmgate" / "runtime" / "ops" / "unit.py"
    spec = importlib.util.spec_from_file_location("_wasmgate_unit", path)
    if spec is None or spec.loader is None:
        sys.exit(f"build-deb: {path} is not loadable")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.render_unit(exec_path)
    return text


def normalize_modes(stage: Path) -> None:
    """0755 directories and executables, 0644 other files, whatever the umask was."""
    for root, dirs, files in os.walk(stage):
        for d in dirs:
            p = Path(root, d)
            if not p.is_symlink():
                p.chmod(0o755)
        for f in files:
            p = Path(root, f)
            if not p.is_symlink():
                p.chmod(0o755 if p.stat().st_mode & 0o111 else 0o644)

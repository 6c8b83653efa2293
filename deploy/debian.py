"""The Debian side of the package: the files outside /opt, DEBIAN/ and its dependencies."""

from __future__ import annotations

import email.parser
import email.utils
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from deploy.debtree import (
    PREFIX,
    Target,
    WheelMeta,
    compile_tree,
    normalize_modes,
    render_unit,
    site_packages,
    write_venv,
)

UNIT = Path("lib/systemd/system/wasmgate.service")
CONFFILES = ("/etc/wasmgate/config.toml", "/etc/wasmgate/trust.json")
SCRIPTS = ("postinst", "prerm", "postrm")
# Shared libraries the wheels may take from the system (the manylinux policy's list, as far
# as these wheels use it) and the Debian package of each; anything else stops the build.
_LIBC = "libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1 libresolv.so.2"
SYSTEM_LIBS = {
    **dict.fromkeys([*_LIBC.split(), "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"], "libc6"),
    "libstdc++.so.6": "libstdc++6",
    "libgcc_s.so.1": "libgcc-s1",
    "libz.so.1": "zlib1g",
}
# Plugins loaded only for an accelerator whose vendor SDK the operator installs (Qualcomm
# QNN, Intel OpenVINO): their libraries are not this package's dependencies.
OPTIONAL_PLUGINS = ("ai_edge_litert/vendors/",)
MAINTAINER = "wasmgate maintainers <wasmgate@users.noreply.github.com>"
HOMEPAGE = "https://github.com/wasmgate/wasmgate"


def build_tree(
    stage: Path, wheel: Path, meta: WheelMeta, target: Target, *, house: Path, deb: Path
) -> None:
    """Everything dpkg-deb packs, under ``stage``."""
    env = stage / PREFIX.relative_to("/")
    site = site_packages(env, target.python)
    target.install(meta.requirements(target), site, house, deps=True)
    shutil.rmtree(site / "bin")  # the dependencies' scripts: not shipped (write_venv)
    target.install([str(wheel)], site, house, deps=False)
    write_venv(env, meta, target.python)
    compile_tree(stage, site, target.python)
    (stage / UNIT).parent.mkdir(parents=True)
    (stage / UNIT).write_text(render_unit(site, f"{PREFIX}/bin/wasmgate"))
    (stage / "usr/bin").mkdir(parents=True)
    (stage / "usr/bin/wasmgate").symlink_to(f"{PREFIX}/bin/wasmgate")
    (stage / "etc/wasmgate").mkdir(parents=True)
    for conffile in CONFFILES:
        shutil.copyfile(deb / Path(conffile).name, stage / conffile.lstrip("/"))
    (stage / "usr/share/doc/wasmgate").mkdir(parents=True)
    (stage / "usr/share/doc/wasmgate/copyright").write_text(copyright_text(meta, site))
    write_docs(stage, meta, site, deb.parent.parent / "docs")
    normalize_modes(stage)
    write_debian_dir(stage, meta, target, site, deb)


def write_debian_dir(stage: Path, meta: WheelMeta, target: Target, site: Path, deb: Path) -> None:
    control = stage / "DEBIAN"
    control.mkdir()
    for name in SCRIPTS:
        shutil.copyfile(deb / name, control / name)
        (control / name).chmod(0o755)
    (control / "conffiles").write_text("".join(f"{c}\n" for c in CONFFILES))
    sums = [f"{md5(p)}  {p.relative_to(stage)}\n" for p in sorted(_files(stage))]
    (control / "md5sums").write_text("".join(sums))
    size_kib = sum(p.lstat().st_size for p in _files(stage)) // 1024
    # procps: the unit's ExecReload runs /bin/kill. init-system-helpers: deb-systemd-helper.
    depends = [f"python{target.python}", *system_depends(site), "init-system-helpers", "procps"]
    fields = {
        "Package": "wasmgate",
        "Version": meta.debian_version,
        "Architecture": target.arch,
        "Maintainer": MAINTAINER,
        "Installed-Size": str(size_kib),
        "Depends": ", ".join(depends),
        "Section": "net",
        "Priority": "optional",
        "Homepage": HOMEPAGE,
        "Description": f"{meta.summary}\n The wasmgate daemon and its command line in a "
        f"self-contained environment\n under {PREFIX}, with its systemd service.",
    }
    (control / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    for p in control.iterdir():
        p.chmod(0o755 if p.name in SCRIPTS else 0o644)


# The operator's documents the package ships (config.toml points at them).
DOCS = ("operator.md", "deploy.md", "shared-memory.md")


def write_docs(stage: Path, meta: WheelMeta, site: Path, docs: Path) -> None:
    """/usr/share/doc/wasmgate: the operator's documents and Debian's changelog (which
    version, built from which commit: what `apt changelog`-style tools and people read)."""
    into = stage / "usr/share/doc/wasmgate"
    into.mkdir(parents=True, exist_ok=True)
    for name in DOCS:
        shutil.copyfile(docs / name, into / name)
    raw = changelog_text(meta, built_commit(site)).encode()
    # mtime 0 and no name in the header: the same bytes for the same input (lintian's -n).
    (into / "changelog.Debian.gz").write_bytes(gzip.compress(raw, 9, mtime=0))


def built_commit(site: Path) -> str | None:
    """The commit setuptools-scm wrote into the wheel (``wasmgate/_version.py``)."""
    path = site / "wasmgate" / "_version.py"
    found = re.search(r"__commit__ = '([^']+)'", path.read_text()) if path.is_file() else None
    return found[1].removeprefix("g") if found else None


def changelog_text(meta: WheelMeta, commit: str | None) -> str:
    when = int(os.environ.get("SOURCE_DATE_EPOCH") or time.time())
    source = f"commit {commit}" if commit else "a tree without git metadata"
    return (
        f"wasmgate ({meta.debian_version}) stable; urgency=medium\n\n"
        f"  * Built from wasmgate {meta.version}, {source}. What changed: the git\n"
        f"    history of {HOMEPAGE}.\n\n"
        f" -- {MAINTAINER}  {email.utils.formatdate(when)}\n"
    )


def _files(stage: Path) -> list[Path]:
    return [
        p
        for p in stage.rglob("*")
        if p.is_file() and not p.is_symlink() and p.relative_to(stage).parts[0] != "DEBIAN"
    ]


def md5(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "md5").hexdigest()


def system_depends(site: Path) -> list[str]:
    """Debian packages for the libraries the wheels' ELF files need but do not carry."""
    elves = [
        p
        for p in site.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and _is_elf(p)
        and not str(p.relative_to(site)).startswith(OPTIONAL_PLUGINS)
    ]
    bundled = {p.name for p in elves}
    needed: dict[str, Path] = {}
    for elf in elves:
        for lib in _needed(elf):
            needed.setdefault(lib, elf)
    unknown = {lib: elf for lib, elf in needed.items() if lib not in bundled | SYSTEM_LIBS.keys()}
    if unknown:
        lines = "\n".join(
            f"  {lib} (needed by {elf.relative_to(site)})" for lib, elf in unknown.items()
        )
        sys.exit(f"build-deb: no Debian package known for these libraries:\n{lines}")
    packages = sorted({SYSTEM_LIBS[lib] for lib in needed if lib not in bundled})
    glibc = _newest_glibc_tag(site) or "2.17"
    return [f"libc6 (>= {glibc})" if p == "libc6" else p for p in packages]


def _is_elf(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _needed(elf: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True, check=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


def _newest_glibc_tag(site: Path) -> str | None:
    """The highest glibc any installed wheel was built for (its WHEEL file's oldest tag)."""
    newest: tuple[int, int] | None = None
    for wheel_file in site.glob("*.dist-info/WHEEL"):
        text = wheel_file.read_text()
        found = [(2, int(m)) for m in re.findall(r"manylinux_2_(\d+)_", text)]
        found += [(2, 17)] * len(re.findall(r"manylinux2014_", text))
        if found:
            need = min(found)
            newest = need if newest is None else max(newest, need)
    return None if newest is None else f"{newest[0]}.{newest[1]}"


def copyright_text(meta: WheelMeta, site: Path) -> str:
    """wasmgate's licence and every bundled distribution's, from their own metadata."""
    lines = [
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
        f"Upstream-Name: wasmgate\nSource: {HOMEPAGE}\n",
        f"Files: *\nLicense: {meta.license}\n",
        f"Bundled Python distributions in {PREFIX} (name version: licence):",
    ]
    for info in sorted(site.glob("*.dist-info/METADATA")):
        m = email.parser.Parser().parsestr(info.read_text(errors="replace"), headersonly=True)
        licence = m["License-Expression"] or (m["License"] or "").split("\n")[0] or "see METADATA"
        lines.append(f" {m['Name']} {m['Version']}: {licence[:100]}")
    return "\n".join(lines) + "\n"

"""An earlier commit's package, importable beside this tree: the "before" daemons of the
A/B scenarios (`bench_tracing`, `bench_before`) run from it through ``PYTHONPATH``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Where each package of the wheel lives in the source tree (pyproject's package-dir).
LAYOUT = {
    "wasmgate": "runtime/_root",
    "wasmgate/runtime": "runtime",
    "wasmgate/sandbox": "sandbox",
    "wasmgate/signing": "signing",
    "wasmgate/device_profiles": "device_profiles",
    "wasmgate/guest_adapters": "guest_adapters",
}


def rev_before(path: str) -> str | None:
    """``WASMGATE_BENCH_BEFORE_REV``, else the parent of the commit that added ``path``;
    None without git history (a shallow clone)."""
    wanted = os.environ.get("WASMGATE_BENCH_BEFORE_REV")
    if wanted:
        return wanted
    try:
        added = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%H", "--", path],
            cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{added[-1]}^" if added else None


def package_tree(rev: str, out: Path) -> Path:
    """The package of ``rev`` as an importable tree under ``out`` (for ``PYTHONPATH``)."""
    src, site = out / "src", out / "site"
    src.mkdir(parents=True)
    archive = out / "src.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "archive", rev], cwd=REPO, stdout=fh, check=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="data")
    for package, folder in LAYOUT.items():
        shutil.copytree(src / folder, site / package, dirs_exist_ok=True)
    return site

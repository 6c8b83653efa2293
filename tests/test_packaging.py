"""The wheel carries every package folder and data file; no bare folder imports exist."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from tests.fixtures.cache import cache_dir, content_key

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "runtime": "wasmgate.runtime",
    "sandbox": "wasmgate.sandbox",
    "signing": "wasmgate.signing",
    "device_profiles": "wasmgate.device_profiles",
    "guest_adapters": "wasmgate.guest_adapters",
}
SKIP_PARTS = {"__pycache__", "_root", "examples", "models", "sdk", "static"}


def _pyproject() -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def _package_dirs() -> dict[str, Path]:
    """Every folder with an __init__.py under the mapped folders, by its import name."""
    found: dict[str, Path] = {}
    for folder, root in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            if SKIP_PARTS & set(rel.parts):
                continue
            found[".".join([root, *rel.parts])] = init.parent
    return found


def test_every_package_folder_is_listed() -> None:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    listed = set(tool["setuptools"]["packages"])
    missing = sorted(set(_package_dirs()) - listed)
    assert not missing, f"add these to [tool.setuptools] packages: {missing}"


def test_no_bare_folder_imports() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+(" + "|".join(FOLDERS) + r")(\.|\s|$)", re.MULTILINE)
    offenders = []
    for path in REPO.rglob("*.py"):
        if {"build", ".git", "dist"} & set(path.relative_to(REPO).parts):
            continue
        if pattern.search(path.read_text(errors="replace")):
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"use the wasmgate.* import root in: {offenders}"


def test_only_the_daemon_folder_imports_the_daemon() -> None:
    # lint-imports checks the installed package; the scripts beside it (the model
    # generators in guest_adapters/models/) are not installed, so the rule is checked here.
    pattern = re.compile(r"^\s*(from|import)\s+wasmgate\.runtime\b", re.MULTILINE)
    offenders = [
        str(path.relative_to(REPO))
        for folder in FOLDERS
        if folder != "runtime"
        for path in (REPO / folder).rglob("*.py")
        if pattern.search(path.read_text(errors="replace"))
    ]
    assert not offenders, (
        f"only runtime/ (and the CLI in it) may import wasmgate.runtime: {offenders}"
    )


def _sources_key() -> str:
    files = sorted(
        p
        for folder in [*FOLDERS, "pyproject.toml"]
        for p in ([REPO / folder] if folder.endswith(".toml") else (REPO / folder).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    )
    return content_key(*(str(p.relative_to(REPO)).encode() + p.read_bytes() for p in files))


@pytest.fixture(scope="module")
def wheel() -> Path:
    out = cache_dir("wheels", _sources_key())
    existing = sorted(out.glob("wasmgate-*.whl"))
    if existing:
        return existing[0]
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*cmd, "-w", str(out), str(REPO)], check=True, capture_output=True)
    return min(out.glob("wasmgate-*.whl"))


@pytest.mark.timeout(300)
def test_wheel_contains_packages_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "wasmgate/__init__.py" in names
    assert "wasmgate/__main__.py" in names
    for package, folder in _package_dirs().items():
        rel = package.replace(".", "/")
        assert f"{rel}/__init__.py" in names, f"{package} missing from the wheel"
        for module in folder.glob("*.py"):
            assert f"{rel}/{module.name}" in names, f"{rel}/{module.name} missing"
        assert f"{rel}/py.typed" in names
    data = [
        *(REPO / "device_profiles").glob("*.toml"),
        *(REPO / "guest_adapters" / "sdk").glob("*.h"),
        *(REPO / "guest_adapters" / "examples").glob("*/samples/*"),  # expect.toml too
        *(REPO / "guest_adapters" / "examples").glob("*/adapter.wasm"),  # the demo's, prebuilt
        REPO / "guest_adapters" / "models" / "digits-test.npz",  # the tritonclient snippet's
        *(REPO / "runtime" / "http" / "static").iterdir(),  # the status page, no CDN
    ]
    for path in data:
        rel = "wasmgate/" + str(path.relative_to(REPO))
        assert rel in names, f"data file {rel} missing from the wheel"
    assert not [n for n in names if n.startswith(("tests/", "runtime/", "sandbox/"))]


def test_the_core_leaves_adapter_authoring_to_the_sdk_extra(wheel: Path) -> None:
    """A gateway's ``pip install wasmgate`` gets no compiler; ``[test]`` gets the sdk."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [
            line.removeprefix("Requires-Dist: ")
            for line in archive.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    core = [r for r in requires if "extra ==" not in r]
    sdk = [r for r in requires if r.endswith('extra == "sdk"')]
    for authoring in ("ziglang", "onnx-ir", "sympy"):
        assert not [r for r in core if r.startswith(authoring)], authoring
    assert [r for r in sdk if r.startswith("ziglang==")], sdk  # pinned: prebuilt modules
    assert [r for r in sdk if r.startswith("onnx-ir")], sdk
    assert 'wasmgate[sdk]; extra == "test"' in requires
    assert any(r.startswith("onnxruntime") for r in core)


def test_the_wheel_has_the_version_the_package_says(wheel: Path) -> None:
    # The version comes from git at build time (setuptools-scm writes wasmgate/_version.py,
    # which wasmgate/__init__.py reads); METADATA says the same.
    archive = zipfile.ZipFile(wheel)
    for module in (REPO / "runtime" / "_root").glob("*.py"):
        assert f"wasmgate/{module.name}" in archive.namelist()
    built = archive.read("wasmgate/_version.py").decode()
    version = re.search(r"__version__ = '([^']+)'", built)
    assert version, built
    meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"\nVersion: {version[1]}\n" in archive.read(meta).decode()
    Version(version[1])  # valid for pip

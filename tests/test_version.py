"""The version moves with the code: each build is versioned from git (setuptools-scm), valid
for pip, ordered the same way by pip and by dpkg (deploy/debtree.py's Debian form), and
`wasmgate --version` names the commit the build came from.

Builds here are real wheels of throw-away clones of this checkout (tests/fixtures/clones.py):
a commit later is a higher version; a tree copied without git metadata, and a `git archive`
tarball, still build, with the versions the docs promise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

import wasmgate
from deploy.debtree import WheelMeta
from tests.fixtures.clones import commit_empty, git, snapshot

pytestmark = pytest.mark.timeout(300)


def build(tree: Path, out: Path) -> tuple[str, str]:
    """The wheel's version and the text of its ``wasmgate/_version.py``."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*cmd, "-w", str(out), str(tree)], check=True, capture_output=True)
    (wheel,) = out.glob("wasmgate-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("wasmgate/_version.py").decode()
    return wheel.name.split("-")[1], text


def debian(version: str) -> str:
    return WheelMeta("wasmgate", version, "", "", (), {}).debian_version


def dpkg_lt(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return snapshot(tmp_path_factory.mktemp("clone") / "wasmgate")


def test_each_commit_builds_a_higher_version_naming_its_commit(clone: Path, tmp_path: Path) -> None:
    first, first_file = build(clone, tmp_path / "n")
    head = git(clone, "rev-parse", "--short=9", "HEAD")
    assert f"+g{head}" in first, first  # the commit, in the version's local part
    assert f"__commit__ = 'g{head}'" in first_file
    commit_empty(clone, "the next version")
    second, _ = build(clone, tmp_path / "n1")
    assert Version(first) < Version(second), (first, second)
    assert dpkg_lt(debian(first), debian(second)), (debian(first), debian(second))
    # Every build of a later commit is also above 0.1.0, what every build said before.
    assert Version("0.1.0") < Version(first)
    assert dpkg_lt("0.1.0", debian(first))


def test_a_release_tag_is_the_version_and_sorts_above_its_dev_builds(
    clone: Path, tmp_path: Path
) -> None:
    git(clone, "tag", "-a", "v0.2.0", "-m", "0.2.0")
    release, _ = build(clone, tmp_path / "r")
    assert release == "0.2.0"
    commit_empty(clone, "after the release")
    after, _ = build(clone, tmp_path / "a")
    assert after.startswith("0.2.1.dev1+g"), after
    assert dpkg_lt(debian(release), debian(after))
    git(clone, "tag", "-a", "v0.3.0rc1", "-m", "a candidate")
    candidate, _ = build(clone, tmp_path / "c")
    assert candidate == "0.3.0rc1"
    assert dpkg_lt(debian(after), debian(candidate))
    assert dpkg_lt(debian(candidate), "0.3.0")


def test_a_tree_without_git_builds_as_the_fallback_version(clone: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    # A fresh copy: what earlier builds left in the clone (egg-info's PKG-INFO) would name
    # their version.
    shutil.copytree(clone, copy, ignore=shutil.ignore_patterns(".git", "*.egg-info", "build"))
    version, text = build(copy, tmp_path / "w")
    assert version == "0.1.0"
    assert "__commit__ = None" in text


def test_a_git_archive_tarball_of_a_tagged_history_builds_as_its_commit(
    clone: Path, tmp_path: Path
) -> None:
    """A `git archive` tarball (GitHub's "download source") carries .git_archival.txt, which
    git fills in: it builds as the same version as the commit itself. (Without any tag in the
    history git writes no describe line and setuptools-scm says 0.0: the first release tag
    must come before tarballs are handed out: docs/deploy.md.)"""
    commit_empty(clone, "0.4.0")
    git(clone, "tag", "-a", "v0.4.0", "-m", "0.4.0")
    head = commit_empty(clone, "after 0.4.0")
    direct, _ = build(clone, tmp_path / "d")
    tarball = tmp_path / "wasmgate.tar"
    git(clone, "archive", "--format=tar", "--prefix=wasmgate/", "-o", str(tarball), "HEAD")
    with tarfile.open(tarball) as tf:
        tf.extractall(tmp_path / "x", filter="data")
    version, text = build(tmp_path / "x" / "wasmgate", tmp_path / "w")
    # The same version; the abbreviated commit may be shorter (git archive's own length).
    assert direct.startswith("0.4.1.dev1+g"), direct
    assert version.startswith("0.4.1.dev1+g"), version
    assert head.startswith(version.split("+g")[1])
    assert f"__commit__ = 'g{version.split('+g')[1]}'" in text


def test_version_names_the_build_and_its_commit() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "wasmgate", "--version"], capture_output=True, text=True, check=True
    )
    line = out.stdout.strip()
    assert line == wasmgate.describe()
    assert line.startswith(f"wasmgate {wasmgate.__version__} (commit ")
    assert "\n" not in line  # one line, whatever the terminal's width
    Version(wasmgate.__version__)  # valid for pip

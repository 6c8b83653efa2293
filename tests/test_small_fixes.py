"""Issue 51's smaller findings, each checked where it lives: what a fresh machine needs is
named, the config's documentation is found where the package points, the package carries
a changelog, and the port-in-use hint names a tool the machine has."""

from __future__ import annotations

import errno
import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.debian import DOCS, write_docs
from deploy.debtree import WheelMeta
from wasmgate.runtime.compose.lifecycle import listen_problem as _listen_problem
from wasmgate.runtime.ops.config import HttpSettings

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_the_readme_names_every_config_module() -> None:
    sentence = README[README.index("Every field is") :][:400]
    for module in sorted((REPO / "runtime" / "ops").glob("config*.py")):
        assert f"`{module.name}`" in sentence, module.name


def test_the_readme_names_every_package_ci_installs() -> None:
    run = (REPO / ".ci" / "run").read_text()
    needed = set(re.findall(r"need\+=\(([\w.-]+)\)", run))
    assert {"python3-venv", "wrk", "docker-registry", "libb64-0d"} <= needed
    listed = README[README.index("needs root for") :][:300]
    assert not [p for p in needed if p not in listed], needed
    assert "apt-get install python3`" in README  # a minimal Debian has no python3


def test_the_build_section_names_what_a_fresh_machine_lacks() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    build = doc[doc.index("**Building the package.**") :][:600]
    assert "apt-get install git binutils python3-venv" in build


def test_the_packages_config_points_at_documents_it_ships() -> None:
    config = (REPO / "deploy" / "deb" / "config.toml").read_text()
    assert "of the wasmgate source" not in config
    named = set(re.findall(r"/usr/share/doc/wasmgate/([\w.-]+\.md)", config))
    named |= set(re.findall(r"/usr/share/doc/wasmgate/[\w.-]+\.md and ([\w.-]+\.md)", config))
    assert named, config
    assert named <= set(DOCS), named


def test_the_package_carries_a_changelog_naming_the_commit(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "wasmgate").mkdir(parents=True)
    (site / "wasmgate" / "_version.py").write_text(
        "__version__ = '0.1.1.dev7+g9d38942a0'\n__commit__ = 'g9d38942a0'\n"
    )
    meta = WheelMeta("wasmgate", "0.1.1.dev7+g9d38942a0", "", "", (), {})
    write_docs(tmp_path / "stage", meta, site, REPO / "docs")
    into = tmp_path / "stage" / "usr/share/doc/wasmgate"
    assert sorted(p.name for p in into.iterdir()) == sorted([*DOCS, "changelog.Debian.gz"])
    text = gzip.decompress((into / "changelog.Debian.gz").read_bytes()).decode()
    assert text.startswith("wasmgate (0.1.1~dev7+g9d38942a0) stable; urgency=medium\n")
    assert "commit 9d38942a0" in text
    if shutil.which("dpkg-parsechangelog"):
        plain = tmp_path / "changelog"
        plain.write_text(text)
        out = subprocess.run(
            ["dpkg-parsechangelog", "-l", str(plain), "-S", "Version"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert out.stdout.strip() == meta.debian_version


@pytest.mark.parametrize("has_ss", [True, False])
def test_the_port_in_use_hint_names_where_ss_comes_from(
    has_ss: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: "/usr/bin/ss" if has_ss else None)
    err = OSError(errno.EADDRINUSE, "in use")
    text = str(_listen_problem(HttpSettings(port=18080), err))
    assert "ss -ltnp 'sport = :18080'" in text
    assert ("apt install iproute2" in text) is not has_ss

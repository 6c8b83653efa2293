"""The files the Debian package installs from deploy/deb/, checked against the code they
configure (fast; the package itself is tried in tests/deploy/test_deb.py)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from deploy.debtree import WheelMeta
from wasmgate.runtime.ops.config import Settings, settings_from
from wasmgate.signing import TrustStore
from wasmgate.signing.trustdoc import TrustDoc

REPO = Path(__file__).resolve().parents[2]
DEB = REPO / "deploy" / "deb"
SETTING = re.compile(r"^#([a-z_]+ = .+)$")
SECTION = re.compile(r"^#?\[([a-z_.]+)\]$")


def _commented_settings() -> list[tuple[str, str, bool]]:
    """(section, ``key = value`` line, is an example) for every commented setting."""
    found, section = [], ""
    for line in (DEB / "config.toml").read_text().splitlines():
        if m := SECTION.match(line):
            section = m.group(1)
        elif m := SETTING.match(line):
            text, _, note = m.group(1).partition("  # ")
            found.append((section, text, note == "example"))
    return found


def _plain(value: object) -> Any:
    # As TOML would spell it: paths as text, tuples as lists.
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=str))


def _default(section: str, key: str) -> Any:
    holder: Any = getattr(Settings(), section) if section else Settings()
    return _plain(getattr(holder, key))


@pytest.mark.parametrize(("section", "line", "example"), _commented_settings())
def test_each_commented_setting_is_valid_and_shows_the_default(
    section: str, line: str, example: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uncommented, every line is accepted; a line not marked "# example" is the default."""
    for name in [n for n in os.environ if n.startswith("WASMGATE_")]:
        monkeypatch.delenv(name)  # the environment would win over the line
    table = f"[{section}]\n{line}\n" if section else f"{line}\n"
    data = tomllib.loads(table)
    settings = settings_from(data, "config.toml")
    key = line.split(" = ", maxsplit=1)[0]
    value = getattr(getattr(settings, section) if section else settings, key)
    assert _plain(value) == next(iter((data[section] if section else data).values()))
    if not example:
        assert _plain(value) == _default(section, key), line


def test_the_config_as_shipped_names_the_units_paths() -> None:
    shipped = settings_from(tomllib.loads((DEB / "config.toml").read_text()), "config.toml")
    assert shipped.paths.trust_file == Path("/etc/wasmgate/trust.json")
    assert shipped.paths.cache_dir == Path("/var/cache/wasmgate")
    assert len(_commented_settings()) >= 30


def test_the_trust_file_is_an_empty_store_as_trust_add_writes_it() -> None:
    data = (DEB / "trust.json").read_bytes()
    assert data == TrustDoc().to_json()
    assert TrustStore.from_bytes(data).doc.signers == {}


@pytest.mark.parametrize("script", ["postinst", "prerm", "postrm"])
def test_maintainer_scripts_are_posix_sh(script: str) -> None:
    path = DEB / script
    assert path.read_text().startswith("#!/bin/sh\n")
    assert path.stat().st_mode & 0o111
    proc = subprocess.run(["dash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("pep440", "debian"),
    [("0.1.0", "0.1.0"), ("1.0rc1", "1.0~rc1"), ("1.0.dev3", "1.0~dev3"), ("2.0b2", "2.0~b2"),
     ("1.0.post1", "1.0.post1"),
     # setuptools-scm's builds between releases: a commit N past 0.9 (+ the commit id).
     ("1.0.dev7+g9d38942a0", "1.0~dev7+g9d38942a0"),
     ("1.0.dev7+g9d38942a0.d20261205", "1.0~dev7+g9d38942a0.d20261205")],
)  # fmt: skip
def test_versions_sort_as_pip_sorts_them(pep440: str, debian: str) -> None:
    """A release candidate must sort before its release, or apt would not upgrade to it."""
    meta = WheelMeta("wasmgate", pep440, "", "", (), {})
    assert meta.debian_version == debian
    if debian != pep440:
        proc = subprocess.run(["dpkg", "--compare-versions", debian, "lt", "1.0"], check=False)
        assert (proc.returncode == 0) == pep440.startswith("1.0")


@pytest.mark.parametrize(
    "argv",
    [["--wheel", "/nonexistent/wasmgate.whl"], ["--python-version", "311"], ["--glibc", "x"]],
)
def test_build_deb_refuses_bad_input_in_one_line(argv: list[str]) -> None:
    proc = subprocess.run([str(REPO / "deploy" / "build-deb"), *argv], capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("build-deb: ")

"""docs/deploy.md, "Install elsewhere (a virtual environment)": both blocks, read from the
doc and run as written in a clean Debian 12 root (amd64, an overlay of `.ci/deb-setup`'s).

The install block runs in one `sh -e`, then the checks from the inside: the environment's
`wasmgate --version`, the unit file being what `serve --print-unit` prints, the service
enabled. Then the "Removing it" block, after the service's state and caches are put where
DynamicUser= keeps them, must take away exactly what the doc names and nothing else.

Where a line cannot run here as written, the least that makes it run, and why:
- `apt install python3-venv`: offline, from the .debs `.ci/deb-setup` downloaded for this
  root's package lists, put in apt's archive cache (apt takes them instead of downloading).
- `pip install .`: the doc's other way, the wheel built from this checkout (`pip install
  dist/wasmgate-*.whl`, the doc says so beside the block): building `.` inside the root would
  need the git history and setuptools-scm there. Its dependencies come from the setup's
  wheelhouse (PIP_NO_INDEX, PIP_FIND_LINKS: no downloads at test time).
- `$EDITOR`: EDITOR=true, an operator who leaves without saving (the line is optional: the
  built-in defaults).
- `systemctl`: no systemd runs in a chroot; `roots.SYSTEMCTL_STUB` records daemon-reload,
  start and stop, the real one enables and disables on the files (as in an image build).
- `signer.pub`: made beforehand by this checkout's `wasmgate keygen`, where the doc assumes one.

amd64 only: the arm64 root would run the same shell lines under qemu and take minutes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.roots import DEPLOY_DOC, REPO, Root, deb_env, under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

HEADING = "Install elsewhere (a virtual environment)"
# The one substitution in the install block (see the module docstring).
CHECKOUT_INSTALL = "/opt/wasmgate/bin/pip install ."
WHEEL_INSTALL = "/opt/wasmgate/bin/pip install /root/dist/wasmgate-*.whl"
UNIT = "/etc/systemd/system/wasmgate.service"
ENABLED = "/etc/systemd/system/multi-user.target.wants/wasmgate.service"
# What the test itself puts in the root or what running anything there leaves: the wheels
# and key in /root (also the commands' HOME), /run (systemctl's record), /tmp.
SCRATCH = ("/root", "/run", "/tmp", "/usr/bin/systemctl.real", "/usr/bin/systemctl")
# apt's and dpkg's records of installing python3-venv.
APT_RECORDS = (
    "/var/lib/dpkg", "/var/log", "/var/cache/apt", "/var/cache/debconf", "/var/lib/apt",
    "/var/cache/ldconfig", "/etc/ld.so.cache",
)  # fmt: skip
# The service's state and caches as systemd keeps them for a dynamic user.
SERVICE_WROTE = (
    "/var/lib/private/wasmgate", "/var/lib/wasmgate",
    "/var/cache/private/wasmgate", "/var/cache/wasmgate",
)  # fmt: skip


def section_blocks(heading: str) -> list[str]:
    """The code blocks under ``## heading`` of docs/deploy.md, up to the next heading."""
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n#", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"^```\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def removed_by(block: str) -> list[str]:
    """The paths the removal block's `rm` commands name (comments cut, `&& ...` cut)."""
    paths: list[str] = []
    for line in block.splitlines():
        command = line.split("#", 1)[0].split("&&", 1)[0].split()
        if command[:1] == ["rm"]:
            paths += [w for w in command[1:] if w.startswith("/")]
    return paths


def link_into(src: Path, dest: Path) -> None:
    """``src``'s files in ``dest``: hard links (same file system as the cache), else copies."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith(".") and "aarch64" not in f.name:
            try:
                os.link(f, dest / f.name)
            except OSError:
                dest.joinpath(f.name).write_bytes(f.read_bytes())


@pytest.fixture(scope="module")
def blocks() -> tuple[str, str]:
    install, remove = section_blocks(HEADING)
    assert CHECKOUT_INSTALL in install, "the install block changed: update the substitution"
    return install, remove


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Root, set[str]]:
    root = Root.clean("amd64", tmp_path_factory.mktemp("venv") / "clean")
    return root, root.paths()


@pytest.fixture(scope="module")
def installed(clean: tuple[Root, set[str]], blocks: tuple[str, str]) -> Root:
    """The install block run as written (but for the substitutions) in a fork of the root."""
    root = clean[0].fork(clean[0].upper.with_name("installed"))
    env = deb_env()
    home = root.upper / "root"
    link_into(Path(env["WASMGATE_DEB_VENV_DEBS_AMD64"]), root.upper / "var/cache/apt/archives")
    link_into(Path(env["WASMGATE_DEB_WHEELS"]), home / "wheels")
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir"]
    subprocess.run([*build, str(home / "dist"), str(REPO)], check=True, stdout=subprocess.DEVNULL)
    keygen = [sys.executable, "-m", "wasmgate", "keygen", "--out", str(home / "signer")]
    subprocess.run(keygen, check=True, stdout=subprocess.DEVNULL)
    root.record_systemctl(running=False)
    script = blocks[0].replace(CHECKOUT_INSTALL, WHEEL_INSTALL)
    offline = "export PIP_NO_INDEX=1 PIP_FIND_LINKS=/root/wheels EDITOR=true\ncd /root\n"
    root.sh(offline + script, answer="y\n")  # apt asks before it installs the dependencies
    return root


def test_the_venv_install_block_runs_and_installs_what_it_says(installed: Root) -> None:
    said = installed.sh("/opt/wasmgate/bin/wasmgate --version").strip()
    (wheel,) = (installed.upper / "root" / "dist").glob("wasmgate-*.whl")
    version = wheel.name.split("-")[1]  # setuptools-scm's, from this checkout
    assert said.startswith(f"wasmgate {version} (commit "), (said, version)
    assert installed.sh("wasmgate --version").strip() == said, "the /usr/local/bin link"
    unit = installed.sh(f"cat {UNIT}")
    assert unit == installed.sh("/opt/wasmgate/bin/wasmgate serve --print-unit")
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start[0].startswith("ExecStart=/opt/wasmgate/bin/wasmgate serve"), exec_start
    assert installed.sh(f"readlink {ENABLED}").strip() == UNIT, "enable did not link the unit"
    key = json.loads((installed.upper / "root" / "signer.pub").read_text())["key_id"]
    trust = json.loads(installed.sh("cat /etc/wasmgate/trust.json"))
    assert trust["signers"][key]["names"] == ["*"], trust
    assert installed.systemctl_calls() == ["daemon-reload", "enable --now wasmgate"]


def service_ran(installed: Root, name: str) -> Root:
    """A fork of the install with what the service writes where DynamicUser= keeps it."""
    root = installed.fork(installed.upper.with_name(name))
    root.sh(
        "for d in /var/lib /var/cache; do install -d -m 0700 $d/private/wasmgate/state && "
        "touch $d/private/wasmgate/state/x && ln -s private/wasmgate $d/wasmgate; done"
    )
    return root


def test_removing_it_takes_exactly_what_the_doc_names(
    installed: Root, clean: tuple[Root, set[str]], blocks: tuple[str, str]
) -> None:
    """The "Removing it" block as written, after the service ran (its state and caches):
    every path the doc names is gone, the enable link with `disable`, nothing else is."""
    root = service_ran(installed, "removed")
    before = root.paths()
    named = removed_by(blocks[1])
    assert set(named) >= {UNIT, "/opt/wasmgate", "/etc/wasmgate", *SERVICE_WROTE}, named
    root.sh(blocks[1])
    after = root.paths()
    gone = before - after
    assert not [p for p in named if p in after], "a path the doc removes is still there"
    assert ENABLED not in after, "`systemctl disable` left the service enabled"
    assert sorted(p for p in gone if not under(p, (*named, ENABLED))) == [], "removed too much"
    assert sorted(after - before) == [], "removing wrote files"
    clean_paths = clean[1]
    left = after - clean_paths
    assert not [p for p in left if "wasmgate" in p and not under(p, SCRATCH)], "leftovers"
    assert sorted(clean_paths - after) == [], "removing deleted files of the base system"


def test_removing_it_without_the_config_line_keeps_config_and_trust(
    installed: Root, blocks: tuple[str, str]
) -> None:
    """The doc's other choice: skip the line whose comment says "keep them to reinstall"."""
    (keep,) = [line for line in blocks[1].splitlines() if "keep them to reinstall" in line]
    root = service_ran(installed, "removed-kept")
    kept = root.sh("find /etc/wasmgate | sort && cat /etc/wasmgate/trust.json")
    root.sh("\n".join(line for line in blocks[1].splitlines() if line != keep))
    assert root.sh("find /etc/wasmgate | sort && cat /etc/wasmgate/trust.json") == kept
    root.sh("! test -e /opt/wasmgate && ! test -e /usr/local/bin/wasmgate")
    root.sh("! test -e /var/lib/private/wasmgate && ! test -e /var/cache/wasmgate")

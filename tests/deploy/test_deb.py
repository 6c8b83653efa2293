"""The Debian package in clean Debian 12 roots, amd64 and arm64, as docs/deploy.md says.

`.ci/deb-setup` provides (and caches) both roots (debootstrap minbase + python3.11, procps,
systemd) and the wheels. Here: the docs' `deploy/build-deb` line builds both packages from
this checkout (offline, from those wheels), then each root (an overlay: the cached root
stays clean) gets the docs' `apt install`, and the package is checked from the inside:
`wasmgate --version`, `wasmgate doctor`, `systemd-analyze verify` on the installed unit, the
daemon started as that unit starts it (its environment, a dynamic user's uid) answering
/v2/health/ready, and `apt remove` / `apt purge` leaving exactly the docs' table.

No systemd runs in a chroot; `roots.SYSTEMCTL_STUB` records what the maintainer scripts ask
of it. The amd64 root pretends systemd runs while installing (reload, then start) and both
while removing (stop); the arm64 install is the chroot case (an image build), where the
scripts may only enable the unit on the files.

arm64 runs under qemu-user through the root's own binfmt_misc (tests/deploy/debroot.py):
only functional checks, its timings mean nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path, PurePosixPath

import pytest

from tests.deploy.roots import (
    ARCHES,
    REPO,
    Root,
    deb_env,
    doc_commands,
    doc_inline,
    file_table,
    under,
)
from tests.fixtures.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# What installing may add besides the package's own files: dpkg's and apt's records and
# logs, and what the test itself puts there: the .deb and keys in /root (also the CLI user's
# home, where ONNX Runtime writes ~/.cache), /run and /tmp, the real systemctl put aside.
BOOKKEEPING = (
    "/var/lib/dpkg", "/var/log", "/var/cache/apt", "/var/cache/debconf", "/var/lib/apt",
    "/var/cache/ldconfig", "/root", "/run", "/tmp", "/usr/bin/systemctl.real",
)  # fmt: skip
PACKAGE_FILES = (
    "/opt/wasmgate", "/usr/bin/wasmgate", "/usr/lib/systemd/system/wasmgate.service",
    "/etc/wasmgate", "/usr/share/doc/wasmgate", "/var/lib/systemd/deb-systemd-helper-enabled",
    "/etc/systemd/system/multi-user.target.wants/wasmgate.service",
)  # fmt: skip
# systemd's own directories for every DynamicUser= service, and deb-systemd-helper's records
# (its purge removes wasmgate's: checked by name after purging).
SYSTEMD_OWN = (
    "/var/lib/private",
    "/var/cache/private",
    "/var/lib/systemd/deb-systemd-helper-enabled",
)
DYNAMIC_UID = 61873  # what systemd's DynamicUser= picks: a uid no passwd entry names


def with_version(line: str, arch: str, debs: Path) -> str:
    """The docs' placeholders filled in as deploy/build-deb named the file it built (the
    version is this checkout's as git describes it now: setuptools-scm)."""
    (deb,) = debs.glob(f"wasmgate_*_{arch}.deb")
    version = deb.name.split("_")[1]
    return line.replace("<version>", version).replace("<arch>", arch)


def pep440(debian_version: str) -> str:
    """The wheel's version back from the package's (deploy/debtree.py: ``.dev`` -> ``~dev``)."""
    return debian_version.replace("~", ".")


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both packages, built by the docs' command (plus: offline, from the setup's wheels)."""
    out = tmp_path_factory.mktemp("debs")
    (line,) = doc_commands("deploy/build-deb ")
    offline = ["--offline", "--wheelhouse", deb_env()["WASMGATE_DEB_WHEELS"], "--out", str(out)]
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([*shlex.split(line), *offline], cwd=REPO, env=env, check=True, timeout=1200)
    return out


@pytest.fixture(scope="module", params=ARCHES)
def clean(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Root:
    return Root.clean(request.param, tmp_path_factory.mktemp(request.param) / "clean")


@pytest.fixture(scope="module")
def clean_paths(clean: Root) -> set[str]:
    return clean.paths()


@pytest.fixture(scope="module")
def installed(clean: Root, debs: Path) -> Root:
    """The docs' `apt install` in a fork of the clean root (amd64: systemd "running")."""
    root = clean.fork(clean.upper.with_name("installed"))
    (line,) = doc_commands("apt install ./")
    name = with_version(line.removeprefix("apt install ./"), root.arch, debs)
    (root.upper / "root").mkdir(parents=True)
    shutil.copyfile(debs / name, root.upper / "root" / name)
    root.record_systemctl(running=root.arch == "amd64")
    root.sh(f"cd /root && {with_version(line, root.arch, debs)}")
    return root


def test_install_adds_only_the_package_and_starts_it_where_systemd_runs(
    installed: Root, clean_paths: set[str]
) -> None:
    after = installed.paths()
    assert sorted(clean_paths - after) == [], "installing deleted files of the base system"
    stray = sorted(p for p in after - clean_paths if not under(p, PACKAGE_FILES + BOOKKEEPING))
    assert not stray, f"files outside the package's places: {stray[:20]}"
    assert not [p for p in after if "ziglang" in p], "the authoring toolchain was packaged"
    for row in file_table():
        if not under(row.paths[0], ("/var",)):  # state and caches: made by the service
            assert set(row.paths) <= after, f"not installed: {row.paths}"
    conffiles = installed.sh("dpkg-query -W -f '${Conffiles}' wasmgate").split()[::2]
    assert sorted(conffiles) == ["/etc/wasmgate/config.toml", "/etc/wasmgate/trust.json"]
    calls = installed.systemctl_calls()
    if installed.arch == "amd64":  # systemd runs: reload, then start what is enabled
        start = calls.index("--quiet --system start wasmgate.service")
        assert calls.index("--system daemon-reload") < start, calls
    else:  # a chroot: enabled (the link in the table), nothing asked of a running systemd
        assert calls, "systemctl was not called at all"
        assert all("--root=/" in call for call in calls), calls


def test_version_and_doctor_run_from_the_package(installed: Root) -> None:
    version = installed.sh("dpkg-query -W -f '${Version}' wasmgate")
    said = installed.sh("wasmgate --version").strip()
    assert said.startswith(f"wasmgate {pep440(version)} (commit "), (said, version)
    report = json.loads(installed.sh("wasmgate doctor --json || [ $? -eq 1 ]"))
    levels = {f["check"]: f["level"] for f in report["findings"]}
    assert report["exit_code"] == 1, report
    assert [c for c, level in levels.items() if level not in {"ok", "skip"}] == ["trust file"]
    found = {f["check"]: f["message"] for f in report["findings"]}
    assert "/etc/wasmgate/config.toml" in found["config"]
    assert "/lib/systemd/system/wasmgate.service" in found["systemd unit"]


def test_the_installed_unit_verifies_and_is_what_print_unit_prints(installed: Root) -> None:
    unit = installed.sh("cat /lib/systemd/system/wasmgate.service")
    assert installed.sh("wasmgate serve --print-unit") == unit
    program = unit_settings(unit)["ExecStart"][0].split()[0]
    installed.sh(f'test -x {program} && test -x "$(head -1 {program} | cut -c3-)"')
    verify = 'systemd-analyze verify --root="$DEBROOT" wasmgate.service'
    proc = subprocess.run(
        installed.argv(["sh", "-c", verify], chroot=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout + proc.stderr == ""


def unit_settings(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            found.setdefault(key, []).append(value)
    return found


def test_the_service_starts_from_the_installed_files(installed: Root) -> None:
    """The docs' next step (trust a signer, as root), then the unit's command as the unit runs
    it: its environment, umask, a dynamic user's uid owning the state and cache directories."""
    root = installed.fork(installed.upper.with_name("serving"))
    root.sh("cd /root && wasmgate keygen --out signer >/dev/null")
    root.sh(f"cd /root && {doc_commands('wasmgate trust add signer.pub')[0]}")
    unit = unit_settings(root.sh("cat /lib/systemd/system/wasmgate.service"))
    env = dict(e.split("=", 1) for e in unit["Environment"])
    dirs = [env["WASMGATE_PATHS__DATA_DIR"], env["WASMGATE_PATHS__CACHE_DIR"]]
    root.sh(f"install -d -m 0700 -o {DYNAMIC_UID} -g {DYNAMIC_UID} {' '.join(dirs)}")
    port = free_port()
    as_service = [
        "setpriv",
        f"--reuid={DYNAMIC_UID}",
        f"--regid={DYNAMIC_UID}",
        "--clear-groups",
        "--",
        *shlex.split(unit["ExecStart"][0]),
    ]
    argv = root.argv(
        ["sh", "-c", 'umask 0077 && exec "$@"', "sh", *as_service],
        {**env, "WASMGATE_HTTP__PORT": str(port)},
    )
    log = root.upper.with_name("serving.log")
    with log.open("w") as out:
        daemon = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            assert wait_ready(port, daemon), log.read_text()[-3000:]
        finally:
            daemon.terminate()  # SIGTERM, passed on to the daemon: it drains and exits 0
            assert daemon.wait(timeout=120) == 0, log.read_text()[-3000:]
    assert "trusts no signer" not in log.read_text(), "the service could not read trust.json"
    shipped = {p for p in root.sh("dpkg -L wasmgate").splitlines() if under(p, ("/opt/wasmgate",))}
    assert set(root.sh("find /opt/wasmgate").splitlines()) == shipped, "written at run time"


def wait_ready(port: int, daemon: subprocess.Popen[bytes], timeout: float = 600) -> bool:
    """Poll /v2/health/ready until it says ready, the daemon exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and daemon.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5) as r:
                if json.loads(r.read()) == {"ready": True}:
                    return True
        except OSError:
            pass
        time.sleep(0.2)  # polling interval, not a synchronization
    return False


def test_remove_keeps_config_and_state_purge_removes_them(
    installed: Root, clean_paths: set[str]
) -> None:
    root = installed.fork(installed.upper.with_name("removed"))
    root.record_systemctl(running=True)  # a booted gateway: removing stops the service
    # What a gateway has by then: an edited config, a trusted signer, the service's state and
    # caches where DynamicUser= keeps them (private/, behind links).
    root.sh(
        "echo '# edited' >> /etc/wasmgate/config.toml && cd /root && "
        "wasmgate keygen --out signer >/dev/null && wasmgate trust add signer.pub --names x"
    )
    root.sh(
        "for d in /var/lib /var/cache; do install -d -m 0700 $d/private/wasmgate/state && "
        "touch $d/private/wasmgate/state/x && ln -s private/wasmgate $d/wasmgate; done"
    )
    rows = file_table()
    (remove,), (purge,) = doc_inline("apt remove "), doc_inline("apt purge ")
    root.sh(remove, answer="y\n")  # apt asks before it removes anything
    assert "stop wasmgate.service" in root.systemctl_calls()
    after = root.paths()
    kept = tuple(p for row in rows if row.after_remove == "kept" for p in row.paths)
    for row in rows:
        present = set(row.paths) & after
        assert present == (set(row.paths) if row.after_remove == "kept" else set()), row
    places = kept + BOOKKEEPING + SYSTEMD_OWN
    parents = {str(parent) for p in kept for parent in PurePosixPath(p).parents}
    assert sorted(p for p in after - clean_paths if not under(p, places) and p not in parents) == []
    assert "# edited" in root.sh("cat /etc/wasmgate/config.toml")
    root.sh(purge, answer="y\n")
    after = root.paths()
    assert not [p for row in rows for p in row.paths if p in after], "purge left files"
    assert sorted(p for p in after - clean_paths if not under(p, BOOKKEEPING + SYSTEMD_OWN)) == []
    assert sorted(clean_paths - after) == [], "purging deleted files of the base system"
    assert not [p for p in after if "wasmgate" in p and not under(p, ("/root", "/tmp", "/run"))]

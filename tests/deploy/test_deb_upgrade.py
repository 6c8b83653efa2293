"""A gateway's second day on the Debian package: version N installed and configured, then
the docs' upgrade to N+1 and back to N, in a clean Debian 12 root (amd64).

N and N+1 are two builds of this checkout that differ only in their version: a throw-away
clone (tests/fixtures/clones.py) built once, then once more after one more commit, both
by the docs' `deploy/build-deb` line. They are cached outside the repo, keyed by the
commit (fixed dates: the same tree on the same history is the same commit) and the
wheelhouse, as `.ci/deb-setup` caches the roots: a warm run builds nothing.

On N the gateway gets what an operator gives it: an edited config, a trusted signer, a
management token (in a drop-in, as the docs advise), a bundle at version 2 (so its
anti-rollback floor is 2) and version 3 staged at 10 %. The daemon runs as the unit runs it
(its environment, a dynamic user's uid); in a chroot no systemd runs, so the restart on
upgrade is the maintainer scripts' call to systemctl (recorded), and the test then starts
the new code itself.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.roots import Root, deb_env, doc_commands
from tests.deploy.test_deb import DYNAMIC_UID, unit_settings, wait_ready
from tests.fixtures.cache import content_key
from tests.fixtures.clones import commit_empty, git, snapshot
from tests.fixtures.net import free_port
from tests.runtime.bundlekit import BundleKit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

# Bump when the way N and N+1 are built changes (their cache key).
RECIPE = 1
TOKEN = "upgrade-test-token"
DROP_IN = "/etc/systemd/system/wasmgate.service.d/token.conf"


def deb_cache() -> Path:
    """Where `.ci/deb-setup` keeps its roots: the built packages go beside them."""
    return Path(deb_env()["WASMGATE_DEB_ROOT_AMD64"]).parent


def build(clone: Path, out: Path) -> Path:
    (line,) = doc_commands("deploy/build-deb ")
    argv = [shlex.split(line)[0], "--arch", "amd64"]  # the docs' command, amd64 only
    offline = ["--offline", "--wheelhouse", deb_env()["WASMGATE_DEB_WHEELS"], "--out", str(out)]
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([*argv, *offline], cwd=clone, env=env, check=True, timeout=1200)
    (deb,) = out.glob("wasmgate_*_amd64.deb")
    return deb


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(N, N+1): two builds of this checkout, N+1 one commit later."""
    clone = snapshot(tmp_path_factory.mktemp("clone") / "wasmgate")
    older = git(clone, "rev-parse", "HEAD")
    newer = commit_empty(clone, "the next version")
    wheels = deb_env()["WASMGATE_DEB_WHEELS"]
    key = content_key(f"{RECIPE} {newer} {wheels}".encode())
    cached = deb_cache() / f"upgrade-{key}"
    if not (cached / ".done").exists():
        shutil.rmtree(cached, ignore_errors=True)
        git(clone, "checkout", "-q", older)
        build(clone, cached / "n")
        git(clone, "checkout", "-q", newer)
        build(clone, cached / "n1")
        (cached / ".done").touch()
        for stale in deb_cache().glob("upgrade-*"):  # one pair at a time (~200 MB)
            if stale != cached:
                shutil.rmtree(stale, ignore_errors=True)
    return next((cached / "n").glob("*.deb")), next((cached / "n1").glob("*.deb"))


def version_of(deb: Path) -> str:
    return deb.name.split("_")[1]


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@contextmanager
def service(root: Root) -> Iterator[int]:
    """The daemon as the installed unit runs it (with the drop-in's environment): its port."""
    unit = unit_settings(root.sh("cat /lib/systemd/system/wasmgate.service"))
    drop_in = unit_settings(root.sh(f"cat {DROP_IN}"))
    env = dict(e.split("=", 1) for e in unit["Environment"] + drop_in["Environment"])
    root.sh(
        f"install -d -m 0700 -o {DYNAMIC_UID} -g {DYNAMIC_UID} "
        f"{env['WASMGATE_PATHS__DATA_DIR']} {env['WASMGATE_PATHS__CACHE_DIR']}"
    )
    port = free_port()
    as_service = ["setpriv", f"--reuid={DYNAMIC_UID}", f"--regid={DYNAMIC_UID}", "--clear-groups"]
    argv = root.argv(
        [
            "sh",
            "-c",
            'umask 0077 && exec "$@"',
            "sh",
            *as_service,
            "--",
            *shlex.split(unit["ExecStart"][0]),
        ],
        {**env, "WASMGATE_HTTP__PORT": str(port)},
    )
    log = root.upper.with_name(f"{root.upper.name}.log")
    with log.open("a") as out:
        daemon = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_ready(port, daemon), log.read_text()[-3000:]
        yield port
    finally:
        daemon.terminate()
        assert daemon.wait(timeout=120) == 0, log.read_text()[-3000:]


def bundles(port: int) -> dict[str, Any]:
    status, body = request(port, "GET", "/v1/bundles")
    assert status == 200, body
    return {b["name"]: b for b in json.loads(body)["bundles"]}


def server_version(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2", timeout=10) as r:
        return str(json.loads(r.read())["version"])


def pep440(debian_version: str) -> str:
    return debian_version.replace("~", ".")


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> BundleKit:
    return BundleKit(tmp_path_factory.mktemp("kit"))


@pytest.fixture(scope="module")
def configured(
    debs: tuple[Path, Path], kit: BundleKit, tmp_path_factory: pytest.TempPathFactory
) -> Root:
    """Version N installed by the docs' line and configured as an operator would."""
    older, _ = debs
    root = Root.clean("amd64", tmp_path_factory.mktemp("upgrade") / "n")
    home = root.upper / "root"
    home.mkdir(parents=True)
    for name in (older, *(kit.build("probe", v) for v in (1, 2, 3))):
        shutil.copyfile(name, home / name.name)
    kit.save_trust(home / "trust.json")
    root.record_systemctl(running=True)
    root.sh(f"cd /root && apt install ./{older.name}")
    root.sh(
        "sed -i 's/^#drain_s = 10.0$/drain_s = 7.0/' /etc/wasmgate/config.toml && "
        "grep -qx 'drain_s = 7.0' /etc/wasmgate/config.toml && "
        "cp /root/trust.json /etc/wasmgate/trust.json && "
        f"mkdir -p {Path(DROP_IN).parent} && printf '[Service]\\n"
        f"Environment=WASMGATE_HTTP__MANAGEMENT_TOKEN={TOKEN}\\n' > {DROP_IN}"
    )
    with service(root) as port:
        for path, wgb in (("/v1/bundles", "probe-2.wgb"), ("/v1/bundles?stage=10", "probe-3.wgb")):
            status, body = request(port, "PUT", path, (home / wgb).read_bytes())
            assert status == 201, body
        assert server_version(port) == pep440(version_of(older))
    return root


def snapshot_of_state(root: Root) -> dict[str, str]:
    """What must survive: config, trust, drop-in, the store's files (by content hash)."""
    listing = root.sh(
        "cd / && sha256sum etc/wasmgate/config.toml etc/wasmgate/trust.json "
        f"{DROP_IN.lstrip('/')} && find var/lib/wasmgate -type f "
        "! -path '*/uploads/*' ! -name '*.lock' -exec sha256sum {} +"
    )
    return {line.split()[1]: line.split()[0] for line in listing.splitlines()}


def check_serving(port: int, kit: BundleKit) -> None:
    """probe 2 serving, 3 staged at 10 %, and the floor 2 refusing version 1."""
    probe = bundles(port)["probe"]
    assert probe["version"] == 2, probe
    assert probe["staged"]["version"] == 3, probe
    assert probe["staged"]["percent"] == 10, probe
    status, body = request(port, "PUT", "/v1/bundles", (kit.root / "probe-1.wgb").read_bytes())
    assert status == 422, body
    assert b"rollback" in body.lower(), body


def apt_install(root: Root, prefix: str, deb: Path) -> None:
    """The docs' line that starts with ``prefix``, for ``deb`` (in /root)."""
    (line,) = doc_commands(prefix)
    # A downgrade asks first (as apt remove does): the operator's yes.
    command = line.replace("./wasmgate_<version>_<arch>.deb", "./" + deb.name)
    root.sh(f"cd /root && {command}", answer="y\n")
    assert root.sh("dpkg-query -W -f '${Version}' wasmgate") == version_of(deb)


@pytest.fixture(scope="module")
def upgraded(configured: Root, debs: tuple[Path, Path]) -> tuple[Root, dict[str, str], list[str]]:
    """N+1 installed over N by the docs' line: the root, the files before, systemctl's calls."""
    _, newer = debs
    root = configured.fork(configured.upper.with_name("n1"))
    before = snapshot_of_state(root)
    (root.upper / "root").mkdir(parents=True)
    shutil.copyfile(newer, root.upper / "root" / newer.name)
    root.sh(": > /run/systemctl.log")
    apt_install(root, "apt install ./", newer)
    return root, before, root.systemctl_calls()


def test_upgrade_keeps_everything_and_restarts_on_the_new_code(
    upgraded: tuple[Root, dict[str, str], list[str]], debs: tuple[Path, Path], kit: BundleKit
) -> None:
    older, newer = debs
    root, before, calls = upgraded
    restart = "--quiet --system restart wasmgate.service"
    assert restart in calls, calls  # postinst: the running service restarts on the new code
    assert calls.index("--system daemon-reload") < calls.index(restart), calls
    assert not [c for c in calls if " stop " in f" {c} "], calls  # prerm stops only on removal
    assert snapshot_of_state(root) == before  # config, trust, drop-in, store: byte for byte
    said = root.sh("wasmgate --version")
    assert said.startswith(f"wasmgate {pep440(version_of(newer))} (commit "), said
    assert pep440(version_of(older)) not in said
    with service(root) as port:
        assert server_version(port) == pep440(version_of(newer))
        check_serving(port, kit)


def test_downgrade_goes_back_to_n_on_the_state_n1_left(
    upgraded: tuple[Root, dict[str, str], list[str]], debs: tuple[Path, Path], kit: BundleKit
) -> None:
    older, _ = debs
    root = upgraded[0].fork(upgraded[0].upper.with_name("back"))
    before = snapshot_of_state(root)
    apt_install(root, "apt install --allow-downgrades ./", older)
    assert snapshot_of_state(root) == before
    with service(root) as port:
        assert server_version(port) == pep440(version_of(older))
        check_serving(port, kit)

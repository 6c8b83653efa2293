"""docs/deploy.md's "Keys and roles for a fleet" command blocks, run as written.

Both blocks are read from the doc (the blocks without a language under ``## Keys and
roles for a fleet``) and typed into one shell (`tests.fixtures.doc_shell.DocShell`) in a
directory holding what the reader has before them: the root key ``root.key`` (and
``.pub``) and a second operator's ``fleet-b.key.pub``, both made by ``wasmgate keygen``.
The first block's ``trust.json`` becomes a real daemon's trust file (gateway ``gw-017``,
a real mosquitto); the second block signs a document with the first block's fleet key and
publishes it to that broker, where the daemon takes it, then clears it. The reader's own
addresses come from outside, as the doc says: ``$BROKER`` (the mosquitto fixture) and
``$REF`` (a pinned reference on a loopback port where no registry answers: the document's
checks come before any pull, and this trust file names no bundle signer anyway).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.doc_shell import DocShell, commands, plain_blocks
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port
from tests.runtime.fleet.daemonkit import PREFIX, fleet_report, retained, wait_report
from tests.runtime.stack import host_profile_name

DOC = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"
HEADING = "## Keys and roles for a fleet"
GATEWAY = "gw-017"
SERIAL = 1764565200000

pytestmark = pytest.mark.timeout(300)


def _reader(tmp: Path, broker: Broker) -> tuple[Path, dict[str, str]]:
    """The reader's directory with their root key and operator B's public key; the env."""
    work = tmp / "reader"
    work.mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {
        **os.environ,
        "PATH": path,  # `wasmgate` as the reader's shell finds it
        "BROKER": f"{broker.host}:{broker.port}",
        "REF": f"127.0.0.1:{free_port()}/wasmgate/digits@sha256:{'3' * 64}",
    }
    for key in ("root.key", "fleet-b.key"):
        keygen = ["wasmgate", "keygen", "--out", key]
        subprocess.run(keygen, cwd=work, env=env, check=True, capture_output=True)
    (work / "fleet-b.key").unlink()  # operator B keeps the private half
    return work, env


def _gateway(factory: Callable[..., Daemon], trust: Path, broker: Broker) -> Daemon:
    return factory(
        config={
            "paths": {"trust_file": trust},
            "profile": host_profile_name(),
            "mqtt": {"host": broker.host, "port": broker.port, "gateway_id": GATEWAY},
            "registry": {"insecure": True, "retries": 0, "backoff_s": 0.1},
        },
        name=GATEWAY,
    )


def test_the_blocks_run_as_written(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    keys, desired = plain_blocks(DOC, HEADING)
    work, env = _reader(tmp_path, mosquitto)
    shell = DocShell(work, env)
    try:
        for command in commands(keys):
            shell.run(command)
        listed = shell.text().split("trust.json: ", 1)[1]
        assert listed.startswith("version 2, root 1 of 1, fleet 1 of 2, 0 signer(s)"), listed
        # both fleet keys ask for the role's names, the root key only signs the trust file
        roles = [line.split()[1:] for line in listed.splitlines()[1:4]]
        fleet = ["fleet", "trusted", "digits*,", "vision-*"]
        root = ["root", "trusted", "(signs", "the", "trust", "file)"]
        assert roles == [root, fleet, fleet], listed
        daemon = _gateway(daemon_factory, work / "trust.json", mosquitto)
        trust = daemon.get_json("/v1/status")["components"]["trust"]
        assert (trust["version"], trust["root_signed"]) == (2, True), trust
        own = f"{PREFIX}/{GATEWAY}/desired"
        lines = commands(desired)
        assert len(lines) == 3, lines  # sign, publish, publish --clear
        for command in lines[:2]:  # sign, publish
            shell.run(command)
        report = wait_report(daemon, lambda r: r.get("serial") == SERIAL)
        assert retained(mosquitto, own) == (work / "desired.json").read_bytes(), report
        shell.run(lines[2])  # publish --clear
        assert retained(mosquitto, own, timeout=2) is None
        wanted = json.loads((work / "desired.json").read_bytes())
        assert wanted["signatures"], wanted
        assert fleet_report(daemon)["serial"] == SERIAL
    finally:
        shell.close()

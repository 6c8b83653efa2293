"""docs/fleet.md's walk-through, from no keys to a rolled-back group, run as written.

The commands and the gateway config are read from the doc itself (the ```sh and ```toml
blocks of its walk-through section), so the doc cannot drift from what is tested. They run
in a shell, in the doc's order, against a real docker-registry (plain HTTP), a real
mosquitto and two real daemons whose config is the doc's TOML. Only what is the reader's
own is set from outside, the way the doc says: ``$REGISTRY`` and ``$BROKER`` (the lab's
addresses), ``$TRUST_FILE`` (each gateway's ``paths.trust_file``), and the documented
``WASMGATE_<SECTION>__<FIELD>`` overrides for what differs per gateway (broker address,
gateway id, HTTP port, data directory). One gateway gets the SIGHUP the doc names, the other
must pick the new trust file up by itself.

After each rollout of ``my-digits:N`` both daemons serve version N; the rollback (a lower
N) is also tried without ``--allow-downgrade`` first, which must be refused and change
nothing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cache import cache_dir
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.trustkit import serving
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DOC = Path(__file__).resolve().parents[3] / "docs" / "fleet.md"
SECTION = "## From no keys to a rolled-back group"
GATEWAYS = ("gw-1", "gw-2")
GROUP = "line-3"


def walkthrough() -> tuple[str, list[str]]:
    """The section's one ```toml block and every line of its ```sh blocks, in order."""
    section = DOC.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    tomls = re.findall(r"```toml\n(.*?)```", section, re.DOTALL)
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(tomls) == 1, "the walk-through shows one gateway config"
    return tomls[0], lines


def rollout_version(command: str) -> int | None:
    """N of the ``my-digits:N`` a ``fleet rollout`` command rolls out (None otherwise)."""
    match = re.search(r"fleet rollout .*/my-digits:(\d+)\"?$", command)
    return int(match.group(1)) if match else None


def test_the_walkthrough_goes_from_no_keys_to_a_rollback() -> None:
    _, commands = walkthrough()
    text = "\n".join(commands)
    for step in ("keygen", "--role root", "--role fleet", "trust sign", '"$TRUST_FILE"',
                 "bundle build", "bundle push", "fleet status"):  # fmt: skip
        assert step in text, step
    assert all("--insecure" in c for c in commands if "bundle push" in c)  # a lab registry
    versions = [v for v in map(rollout_version, commands) if v is not None]
    assert versions[-1] < max(versions), versions  # it ends with a rollback
    assert "--allow-downgrade" in [c for c in commands if "fleet rollout" in c][-1]


def _env(tmp: Path, registry: Registry, broker: Broker) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        **os.environ,
        "PATH": path,  # `wasmgate` as the reader's shell finds it
        "HOME": str(tmp / "home"),
        "XDG_DATA_HOME": str(tmp / "home" / ".local" / "share"),
        "WASMGATE_PATHS__DATA_DIR": str(tmp / "operator-data"),  # not /var/lib as root
        "WASMGATE_BUILD_CACHE": str(cache_dir("adapters")),
        "REGISTRY": registry.address,
        "BROKER": f"{broker.host}:{broker.port}",
    }


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip


def _wait(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not after {timeout}s"
        time.sleep(0.2)


def _root_signed(daemon: Daemon) -> bool:
    return bool(daemon.get_json("/v1/status")["components"]["trust"]["root_signed"])


def _serves(daemon: Daemon, version: int) -> bool:
    return serving(daemon) == {"my-digits": version}


def _reported(broker: Broker) -> bool:
    """Both gateways' deployment reports are retained on the broker (group members)."""
    with OperatorClient(BrokerSettings(broker.host, broker.port)) as client:
        reports = client.collect(["wasmgate/v1/+/deployment"], 5)
    return all(f"wasmgate/v1/{gw}/deployment" in reports for gw in GATEWAYS)


@pytest.fixture
def gateways(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> dict[str, Daemon]:
    """Two daemons on the doc's gateway config; no trust file yet (they trust nothing)."""
    config: dict[str, Any] = tomllib.loads(walkthrough()[0])
    out = {}
    for gw in GATEWAYS:
        env = {
            "WASMGATE_MQTT__HOST": mosquitto.host,
            "WASMGATE_MQTT__PORT": str(mosquitto.port),
            "WASMGATE_MQTT__GATEWAY_ID": gw,
        }
        out[gw] = daemon_factory(config=config, env=env, name=gw)
    return out


def _install_trust(
    command: str, gateways: dict[str, Daemon], cwd: Path, env: dict[str, str]
) -> None:
    for gw, daemon in gateways.items():
        trust_file = daemon.workdir / "data" / "trust.json"  # the default paths.trust_file
        done = run(command, cwd, {**env, "TRUST_FILE": str(trust_file)})
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        if gw == GATEWAYS[0]:  # `systemctl reload wasmgate`; gw-2 must notice by itself
            assert daemon.proc is not None
            daemon.proc.send_signal(signal.SIGHUP)
    for gw, daemon in gateways.items():
        _wait(f"{gw} applies the root-signed trust file", partial(_root_signed, daemon))


def _check_rollout(
    command: str, version: int, gateways: dict[str, Daemon], cwd: Path, env: dict[str, str]
) -> None:
    """Before a rollback: the same command without --allow-downgrade is refused."""
    before = {gw: serving(d) for gw, d in gateways.items()}
    if "--allow-downgrade" in command:
        refused = run(command.replace(" --allow-downgrade", ""), cwd, env)
        assert refused.returncode == 2, refused.stderr
        assert "to roll back, give --allow-downgrade" in refused.stderr
        assert {gw: serving(d) for gw, d in gateways.items()} == before
    done = run(command, cwd, env)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    for gw, daemon in gateways.items():
        _wait(f"{gw} serves v{version}", partial(_serves, daemon, version))


def _answers_zero(daemon: Daemon, sample: Path) -> bool:
    request = urllib.request.Request(
        f"{daemon.url}/v1/adapters/my-digits", data=sample.read_bytes(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return b'"digit":0' in answer.read().replace(b" ", b"")


def test_the_walkthrough_runs_as_written(
    tmp_path: Path, mosquitto: Broker, registry: Registry, gateways: dict[str, Daemon]
) -> None:
    work = tmp_path / "operator"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = _env(tmp_path, registry, mosquitto)
    status = ""
    for command in walkthrough()[1]:
        version = rollout_version(command)
        if '"$TRUST_FILE"' in command:
            _install_trust(command, gateways, work, env)
        elif version is not None:
            _check_rollout(command, version, gateways, work, env)
        else:
            if "fleet status" in command:
                _wait("both gateways report to the broker", lambda: _reported(mosquitto))
            done = run(command, work, env)
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            status = done.stdout if "fleet status" in command else status
    for gw in GATEWAYS:  # the doc's last `fleet status`: both applied, back on v1
        assert re.search(rf"^{gw}\s+applied\s.*\sv1$", status, re.MULTILINE), status
    sample = work / "my-digits" / "samples" / "zero.json"
    assert all(_answers_zero(d, sample) for d in gateways.values())

"""Confined workers in a real 2-worker gateway (`wasmgate.runtime.ops.confine`).

Each worker runs the attacks of ``tests/fixtures/confine_probe`` right after it confined
itself (a ``sitecustomize`` on the workers' path wraps the real call) against the demo's
signing key in the data folder and a key beside the config file, and logs the answers. The
supervisor is not confined: it installs, so it reads what it must."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.runtime.supervisor.workerkit import (
    SAMPLE,
    TOKEN,
    call,
    serving,
    until_replaced,
    until_serving,
)
from wasmgate.runtime.ops.landlock import abi_version
from wasmgate.runtime.ops.seccomp import numbers
from wasmgate.signing.build import build_bundle
from wasmgate.signing.keys import generate_key, read_private_key, write_private_key

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(abi_version() == 0, reason="this kernel has no Landlock"),
]
PROBE = Path(__file__).resolve().parents[2] / "fixtures" / "confine_probe"
_LINE = re.compile(r"^CONFINE-PROBE (\d+) (.*)$", re.MULTILINE)
_REFUSED = ("EACCES", "EXDEV", "EPERM")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("confined")
    demo = root / "data" / "demo"
    write_private_key(root / "fleet.key", generate_key())  # beside the config file
    probe = {
        "keys": [str(demo / "demo-signing.key"), str(root / "fleet.key")],
        "readable": [str(demo / "bundles" / "digits.wgb"), str(demo / "trust.json")],
        "writable": str(demo / "state"),
    }
    env = {"PYTHONPATH": str(PROBE), "WASMGATE_TEST_PROBE": json.dumps(probe)}
    config = {"workers": {"count": 2}, "http": {"management_token": TOKEN}}
    with serving(Daemon(root, config, ("--demo",), env=env)) as daemon:
        yield daemon


def probed(daemon: Daemon, pid: object, timeout: float = 30.0) -> dict[str, Any]:
    """What worker ``pid`` found right after it confined itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for found_pid, found in _LINE.findall(daemon.log()):
            if int(found_pid) == int(str(pid)):
                answers: dict[str, Any] = json.loads(found)
                return answers
        time.sleep(0.05)
    raise TimeoutError(f"no probe from worker {pid}:\n{daemon.log()[-3000:]}")


def assert_confined(daemon: Daemon, pid: object) -> None:
    found = probed(daemon, pid)
    reached = {k: v for k, v in found["keys"].items() if v not in _REFUSED}
    assert reached == {}, f"worker {pid} reached a key: {reached}"
    assert set(found["works"].values()) == {"ok"}, found["works"]
    # Every thread, not only the main one: the process confined itself with one thread and
    # each later one inherited it (NoNewPrivs is set in the same call as Landlock).
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        assert "NoNewPrivs:\t1" in status, f"thread {task.name}"
        assert "CapEff:\t0000000000000000" in status
        assert "CapBnd:\t0000000000000000" in status
        if numbers(platform.machine()):
            assert "Seccomp:\t2" in status  # the system call filter


def worker_pids(daemon: Daemon) -> list[object]:
    return [w["pid"] for w in until_serving(daemon, 2)]


def test_every_worker_is_confined_and_the_supervisor_is_not(gateway: Daemon) -> None:
    for pid in worker_pids(gateway):
        assert_confined(gateway, pid)
        other = probed(gateway, pid)["other"]
        assert other["exec what it wrote"] == "EACCES"
        assert "EACCES" in other["read a disk"].split(",")  # and no "ok"
        if abi_version() >= 4:
            assert other["bind TCP"] == "EACCES"
    assert gateway.proc is not None
    supervisor = Path(f"/proc/{gateway.proc.pid}/status").read_text()
    assert "NoNewPrivs:\t0" in supervisor  # it installs bundles: nothing taken from it
    assert str(gateway.proc.pid) not in "".join(p for p, _ in _LINE.findall(gateway.log()))


def test_confined_workers_serve_and_reload(gateway: Daemon) -> None:
    pids = worker_pids(gateway)
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(20)} == {200}
    since = len(gateway.log())
    assert gateway.proc is not None
    gateway.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while gateway.log()[since:].count("reloaded") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gateway.log()[since:].count("reloaded") >= 3, gateway.log()[since:]  # all three
    assert worker_pids(gateway) == pids  # reloaded in place, not restarted
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(20)} == {200}


def settled(daemon: Daemon, quiet_s: float = 3.0, timeout: float = 120.0) -> list[object]:
    """The worker pids once no roll runs: both serving, the same for ``quiet_s`` (a SIGHUP
    or a change of the bundle folder replaces them a moment after it is applied)."""
    deadline = time.monotonic() + timeout
    pids, since = worker_pids(daemon), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers still changing: {pids}")
        time.sleep(0.1)
        now = worker_pids(daemon)
        if now != pids:
            pids, since = now, time.monotonic()
    return pids


def test_an_install_rolls_the_workers_and_the_new_ones_are_confined(gateway: Daemon) -> None:
    """A newer digits-zig, signed with the demo's key, moved into the bundle folder: the
    supervisor installs it and replaces the workers, and the new ones are confined."""
    before = set(settled(gateway))
    demo = gateway.workdir / "data" / "demo"
    key = read_private_key(demo / "demo-signing.key")  # this test is not confined
    staged = demo / "bundles" / ".digits-zig-next.tmp"
    built = build_bundle(demo / "src" / "examples" / "digits-zig", key, staged,
                         version=int(time.time()) + 10**9)  # fmt: skip
    staged.rename(demo / "bundles" / "digits-zig-next.wgb")

    def serving() -> object:
        rows = gateway.get_json("/v1/status")["models"]
        return next(m["version"] for m in rows if m["name"] == "digits-zig")

    deadline = time.monotonic() + 60
    while serving() != built.version and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serving() == built.version
    while set(worker_pids(gateway)) & before and time.monotonic() < deadline:
        time.sleep(0.05)  # the roll may wait for one still running
    after = settled(gateway)
    assert not set(after) & before, "the workers were not replaced"
    for pid in after:
        assert_confined(gateway, pid)
    assert {call(gateway, "/v1/adapters/digits-zig", SAMPLE) for _ in range(20)} == {200}


def test_a_worker_restarted_after_sigkill_is_confined(gateway: Daemon) -> None:
    victim = settled(gateway)[0]
    os.kill(int(str(victim)), signal.SIGKILL)
    back = until_replaced(gateway, victim, timeout=30)
    assert_confined(gateway, back[0]["pid"])
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(20)} == {200}


def test_a_config_saved_as_a_new_file_is_refused_by_the_workers_reload(
    gateway: Daemon,
) -> None:
    """What docs/deploy.md says: Landlock knows the config as the file it was at the
    worker's start. A SIGHUP after a save that replaces the file is refused in the workers
    (logged, the running configuration kept), and they serve on."""
    settled(gateway)
    config = gateway.config_path
    fresh = config.with_name("config.toml.new")
    fresh.write_bytes(config.read_bytes())
    fresh.replace(config)  # as an editor saves: a new file under the old name
    since = len(gateway.log())
    assert gateway.proc is not None
    gateway.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while gateway.log()[since:].count("reload refused") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    refused = [ln for ln in gateway.log()[since:].splitlines() if "reload refused" in ln]
    assert len(refused) == 2, refused  # both workers; the supervisor reloaded
    assert all("Permission denied" in ln for ln in refused), refused
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(20)} == {200}

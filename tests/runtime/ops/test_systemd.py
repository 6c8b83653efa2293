"""systemd integration: sd_notify datagrams, watchdog cadence, the daemon under a notify
socket (READY, WATCHDOG, SIGHUP reload, SIGTERM drain), and the hardened unit file."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, write_config
from tests.fixtures.notify_socket import NotifySocket
from tests.fixtures.waits import until, until_async
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.ops.unit import current_executable, render_unit, unit_path_problems

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[NotifySocket]:
    s = NotifySocket(tmp_path / "notify")
    yield s
    s.close()


def test_notify_over_a_path_socket(sock: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": sock.address})
    assert notifier.enabled
    assert notifier.ready("serving 1 adapters")
    assert notifier.stopping()
    ready = sock.wait_for("READY", "1")
    assert ready.text == "READY=1\nSTATUS=serving 1 adapters"
    assert sock.wait_for("STOPPING", "1").fields["STATUS"] == "draining"


def test_notify_over_an_abstract_socket() -> None:
    sock = NotifySocket(abstract=f"wasmgate-test-{os.getpid()}")
    try:
        assert Notifier({"NOTIFY_SOCKET": sock.address}).notify("WATCHDOG=1")
        assert sock.wait_for("WATCHDOG").text == "WATCHDOG=1"
    finally:
        sock.close()


def test_off_outside_systemd() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert not notifier.ready("x")
    assert notifier.watchdog_s is None
    assert Notifier({"NOTIFY_SOCKET": "vsock:2:1"}).enabled is False
    # a watchdog meant for another process, or a malformed one, is ignored
    assert Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).watchdog_s is None
    assert Notifier({"WATCHDOG_USEC": "soon"}).watchdog_s is None
    mine = {"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(mine).watchdog_s == 3.0


async def test_watchdog_pings_at_half_the_timeout_from_the_loop(sock: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": sock.address, "WATCHDOG_USEC": "400000"})
    async with notifier.watchdog():
        await until_async(lambda: len(sock.with_field("WATCHDOG", "1")) >= 5, "five pings", 10)
        blocked_from = time.monotonic()
        time.sleep(0.6)  # a wedged event loop (what is under test): no pings meanwhile
        blocked_to = time.monotonic()
        # the loop is back: pings resume
        await until_async(lambda: sock.with_field("WATCHDOG", "1")[-1].at >= blocked_to, "a ping")
    pings = [d.at for d in sock.with_field("WATCHDOG", "1")]
    first = pings[:5]
    # every 0.2 s: never faster, and well under the full 0.4 s timeout (that would take 1.6 s)
    assert 0.75 <= first[-1] - first[0] < 1.4, first
    assert not [t for t in pings if blocked_from + 0.05 < t < blocked_to]


# -- the daemon under a notify socket ---------------------------------------------------------


def _post(url: str, payload: bytes, timeout: float = 30) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=payload, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _get_status(url: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture
def notified_daemon(
    tmp_path: Path, sock: NotifySocket, daemon_factory: Callable[..., Daemon]
) -> tuple[Daemon, BundleKit, dict[str, Any]]:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    kit.build("probe", 1, sections={"limits": {"deadline_ms": 20_000}}, out_dir=bundles)
    config: dict[str, Any] = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "profile": host_profile_name(),
        "drain_s": 10,
    }
    env = {"NOTIFY_SOCKET": sock.address, "WATCHDOG_USEC": "500000"}
    daemon = daemon_factory(config=config, env=env, name="d")
    return daemon, kit, config


def test_daemon_ready_watchdog_reload(
    notified_daemon: tuple[Daemon, BundleKit, dict[str, Any]], sock: NotifySocket
) -> None:
    daemon, kit, config = notified_daemon
    ready = sock.wait_for("READY", "1")
    assert "serving 1 adapters" in ready.fields["STATUS"]
    [loading] = sock.with_field("EXTEND_TIMEOUT_USEC")  # one bundle loaded at start
    assert loading.fields["STATUS"] == "loading probe-1.wgb (1/1)"  # with the count
    assert loading.at < ready.at
    until(lambda: len(sock.with_field("WATCHDOG", "1")) >= 2, "two watchdog pings", 10)
    assert _get_status(f"{daemon.url}/v1/bundles", "t0ken") == 403

    # SIGHUP: a new token applies at once; a bundle dropped meanwhile is served
    cfg = {**config, "paths": {**config["paths"], "data_dir": daemon.workdir / "data"}}
    write_config(daemon.config_path, {**cfg, "http": {"management_token": "t0ken"}, "drain_s": 10})
    bundles = daemon.workdir / "data" / "bundles"
    kit.build("echo", 1, model=False, out_dir=bundles)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    sock.wait_for("RELOADING", "1")
    until(lambda: len(sock.with_field("READY", "1")) >= 2, "READY after the reload", 20)
    assert "serving 2 adapters" in sock.with_field("READY", "1")[-1].fields["STATUS"]
    assert _get_status(f"{daemon.url}/v1/bundles", "t0ken") == 200
    assert _get_status(f"{daemon.url}/v1/bundles", "wrong") == 401
    assert _post(f"{daemon.url}/v1/adapters/echo", b"Pok") == (200, b"v1:ok")

    # an invalid config on SIGHUP changes nothing and the daemon keeps serving
    daemon.config_path.write_text("drain_s = 'soon'\n")
    mark = len(daemon.log())
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_log("reload refused", since=mark)
    assert _get_status(f"{daemon.url}/v1/bundles", "t0ken") == 200


def test_sigterm_drains_in_flight_requests(
    notified_daemon: tuple[Daemon, BundleKit, dict[str, Any]], sock: NotifySocket
) -> None:
    daemon, _kit, _config = notified_daemon
    sock.wait_for("READY", "1")
    results: list[tuple[int, bytes]] = []
    slow = threading.Thread(
        target=lambda: results.append(_post(f"{daemon.url}/v1/adapters/probe", b"W800"))
    )
    slow.start()
    running = 'wasmgate_in_flight{name="probe"}'
    until(lambda: daemon.metric(running) >= 1, "the slow request running in the sandbox")
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    sock.wait_for("STOPPING", "1", timeout=5)
    slow.join(timeout=30)
    assert results == [(200, b"v1:800")]
    assert daemon.proc.wait(timeout=20) == 0
    assert "stopped" in daemon.log()


# -- the unit file ------------------------------------------------------------------------


def test_deploy_unit_is_the_rendered_default() -> None:
    assert (REPO / "deploy" / "wasmgate.service").read_text() == render_unit()
    assert "MemoryDenyWriteExecute=no" in render_unit()
    assert "Type=notify" in render_unit()


def test_print_unit_names_this_installation(tmp_path: Path) -> None:
    out = subprocess.run(
        [current_executable(), "serve", "--print-unit", "--config", str(tmp_path / "c.toml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"ExecStart={current_executable()} serve --config {tmp_path / 'c.toml'}" in out


def test_print_unit_warns_about_paths_the_unit_hides(tmp_path: Path) -> None:
    done = subprocess.run(
        [current_executable(), "serve", "--print-unit", "--config", str(tmp_path / "c.toml")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "[Service]" in done.stdout  # the unit itself stays clean on stdout
    assert "warning:" not in done.stdout
    assert f"--config {tmp_path / 'c.toml'}: {tmp_path / 'c.toml'} is hidden by PrivateTmp=yes" in (
        done.stderr
    )


@pytest.mark.parametrize(
    ("exec_path", "config", "hidden"),
    [
        ("/usr/local/bin/wasmgate", "/etc/wasmgate/config.toml", []),
        ("/root/venv/bin/wasmgate", "/etc/wasmgate/config.toml", ["ProtectHome=yes"]),
        ("/home/pi/.venv/bin/wasmgate", "/var/tmp/c.toml", ["ProtectHome=yes", "PrivateTmp=yes"]),
        ("/rootfs/bin/wasmgate", "/tmpfiles/c.toml", []),  # a prefix, not a parent
    ],
)
def test_unit_path_problems(exec_path: str, config: str, hidden: list[str]) -> None:
    problems = unit_path_problems(exec_path, config)
    assert [p.rsplit(" ", 1)[-1] for p in problems] == hidden


@pytest.fixture
def unit_file(tmp_path: Path) -> Path:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install Debian's `systemd` package")
    path = tmp_path / "wasmgate.service"
    path.write_text(render_unit(current_executable()))  # ExecStart must exist for verify
    return path


def test_unit_verifies_cleanly(unit_file: Path) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(unit_file)], capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stderr) == (0, "")


def test_unit_exposure_is_low(unit_file: Path) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(unit_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match is not None, proc.stdout + proc.stderr
    assert float(match.group(1)) <= 2.0, proc.stdout

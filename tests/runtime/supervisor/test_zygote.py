"""Workers forked from the zygote in a real 2-worker gateway
(`wasmgate.runtime.compose.zygote`, `wasmgate.runtime.supervisor.zygote`).

What is checked from outside, in ``/proc``: who forked whom (every worker is the
supervisor's child, the zygote's too, named by ``comm``), that a worker shares the zygote's
pages, that the zygote stays single-threaded, and what happens when one of them is killed."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.runtime.supervisor.workerkit import (
    SAMPLE,
    call,
    demo_gateway,
    serving,
    until_replaced,
    until_serving,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with demo_gateway(tmp_path_factory, "zygote") as daemon:
        yield daemon


def zygote(daemon: Daemon) -> dict[str, object]:
    found: dict[str, object] = daemon.get_json("/v1/status")["components"]["workers"]["zygote"]
    return found


def until_zygote(daemon: Daemon, other_than: object, timeout: float = 60.0) -> dict[str, object]:
    """The zygote once it is ready with a pid other than ``other_than``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = zygote(daemon)
        if now["state"] == "ready" and now["pid"] not in (None, other_than):
            return now
        time.sleep(0.05)
    raise TimeoutError(f"no new zygote: {zygote(daemon)}")


def status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == field:
            return value.strip()
    raise KeyError(field)


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def anon_kib(pid: int) -> tuple[int, int]:
    """(anonymous memory mapped, its proportional share) of ``pid``, KiB."""
    rollup = {
        k: int(v.split()[0])
        for k, _, v in (line.partition(":") for line in
                        Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    }  # fmt: skip
    return rollup["Anonymous"], rollup["Pss_Anon"]


def test_workers_are_forked_from_the_zygote_and_share_its_pages(gateway: Daemon) -> None:
    assert gateway.proc is not None
    supervisor = gateway.proc.pid
    workers = until_serving(gateway, 2)
    z = zygote(gateway)
    assert z["state"] == "ready", z
    assert z["started"] == "forked", z  # forked by `serve` itself, before any thread
    zpid = int(str(z["pid"]))
    assert comm(zpid) == "wasmgate-zygote"
    assert status_field(zpid, "PPid") == str(supervisor)
    assert status_field(zpid, "Threads") == "1"  # it forks: no thread may hold a lock
    for worker in workers:
        pid = int(str(worker["pid"]))
        assert comm(pid) == f"wasmgate-w{worker['index']}"
        # Handed to the supervisor (a subreaper), which reaps it and reads its status.
        assert status_field(pid, "PPid") == str(supervisor)
        assert b"--worker" not in Path(f"/proc/{pid}/cmdline").read_bytes()  # not exec'd
        assert status_field(pid, "NoNewPrivs") == "1"  # confined, as an exec'd worker is
        mapped, share = anon_kib(pid)
        # An exec'd worker's heap is its own (its share is all of it); a forked one
        # shares the imports with the zygote, the supervisor and the other worker.
        assert share < 0.8 * mapped, (mapped, share)
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(20)} == {200}


def test_a_killed_zygote_is_started_again_and_workers_still_restart_forked(
    gateway: Daemon,
) -> None:
    before = zygote(gateway)
    os.kill(int(str(before["pid"])), signal.SIGKILL)
    after = until_zygote(gateway, before["pid"])
    assert after["started"] == "exec"  # the supervisor has threads now: a fresh one
    assert after["last_exit"] == "signal 9"
    assert int(str(after["restarts"])) == int(str(before["restarts"])) + 1
    log = gateway.log_path.read_text()
    assert "zygote ended (signal 9): starting another" in log
    zpid = int(str(after["pid"]))
    assert comm(zpid) == "wasmgate-zygote"
    assert status_field(zpid, "Threads") == "1"
    # The workers the killed zygote forked serve on; one killed now comes from the new one.
    victim = until_serving(gateway, 2)[0]
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(10)} == {200}
    os.kill(int(str(victim["pid"])), signal.SIGKILL)
    back = until_replaced(gateway, victim["pid"], timeout=60)[0]
    assert back["last_exit"] == "signal 9"
    pid = int(str(back["pid"]))
    assert comm(pid) == "wasmgate-w0"
    assert b"--worker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    started = re.search(rf"worker 0 started .*pid={pid}\b.*", gateway.log_path.read_text())
    assert started is not None
    assert "start=forked" in started.group(0)
    until_serving(gateway, 2)
    assert {call(gateway, "/v1/adapters/digits", SAMPLE) for _ in range(10)} == {200}


def test_zygote_false_execs_the_workers(tmp_path: Path) -> None:
    config = {"workers": {"count": 2, "zygote": False}}
    with serving(Daemon(tmp_path, config, ("--demo",))) as daemon:
        assert daemon.proc is not None
        assert zygote(daemon)["state"] == "off"
        for worker in until_serving(daemon, 2):
            pid = int(str(worker["pid"]))
            assert b"--worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert status_field(pid, "PPid") == str(daemon.proc.pid)
        children = [p for p in Path("/proc").iterdir() if p.name.isdigit()
                    and _ppid(p) == daemon.proc.pid]  # fmt: skip
        assert len(children) == 2  # no zygote
        assert {call(daemon, "/v1/adapters/digits", SAMPLE) for _ in range(10)} == {200}


def test_without_a_zygote_to_be_had_the_workers_are_execd_and_it_is_told_once(
    tmp_path: Path,
) -> None:
    """ONNX Runtime's telemetry turned on runs a thread from its import: then no zygote is
    forked, each exec'd one refuses, and after three the workers start as before."""
    env = {"ORT_DISABLE_TELEMETRY": "0", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    with serving(Daemon(tmp_path, {"workers": {"count": 2}}, ("--demo",), env)) as daemon:
        z = zygote(daemon)
        assert z["state"] == "off", z
        assert z["started"] == "exec", z
        assert "telemetry" in str(z["last_exit"]), z
        for worker in until_serving(daemon, 2):
            assert b"--worker" in Path(f"/proc/{worker['pid']}/cmdline").read_bytes()
        assert {call(daemon, "/v1/adapters/digits", SAMPLE) for _ in range(10)} == {200}
        log = daemon.log_path.read_text()
        assert log.count("no zygote to fork a worker from") == 1, log


def test_a_stop_that_signals_every_process_stops_cleanly(tmp_path: Path) -> None:
    """systemd's stop sends SIGTERM to every process of the unit at once (and a terminal's
    Ctrl-C SIGINT to the whole group): the zygote is not started again, the workers drain,
    the supervisor exits 0 and leaves none of them."""
    daemon = Daemon(tmp_path, {"workers": {"count": 2}}, ("--demo",))
    daemon.start(timeout=240)
    assert daemon.proc is not None
    supervisor = daemon.proc
    workers = [int(str(w["pid"])) for w in until_serving(daemon, 2)]
    zpid = int(str(zygote(daemon)["pid"]))
    os.kill(zpid, signal.SIGTERM)  # the zygote first, noticeably: the worst order
    time.sleep(0.5)
    for pid in (*workers, supervisor.pid):
        os.kill(pid, signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    daemon.proc = None
    log = daemon.log_path.read_text()
    assert "zygote ended" not in log, log
    assert "stopped" in log
    assert not [p for p in (zpid, *workers) if Path(f"/proc/{p}").exists()]


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1

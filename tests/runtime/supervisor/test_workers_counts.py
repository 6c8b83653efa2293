"""The gateway's counters go on across the workers it replaces: a roll (every install,
removal, promotion or trust change replaces them all) and a killed worker must not take
their counts with them, or Prometheus reads a counter reset.

A scraper reads ``/metrics`` every 20 ms while a client never stops: no read may be lower
than the one before, and after a roll every answered request is counted exactly once."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.notify_socket import NotifySocket
from tests.fixtures.waits import metric
from tests.runtime.supervisor.workerkit import (
    ADAPTER_REQUESTS,
    TOKEN,
    call_quietly,
    demo_gateway,
    serving,
    until_replaced,
    until_serving,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with demo_gateway(tmp_path_factory, "counts") as daemon:
        yield daemon


class Traffic:
    """A client that never stops (counting its 200s) and a scraper of the counter."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.answered = 0
        self.failed: list[int] = []
        self.reads: list[float] = []
        self.unread: list[str] = []  # scrapes that failed, with their cause
        self._stop = threading.Event()

    def _client(self) -> None:
        while not self._stop.is_set():
            status = call_quietly(self.daemon)
            if status == 200:
                self.answered += 1
            else:
                self.failed.append(status)

    def _scraper(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(f"{self.daemon.url}/metrics", timeout=10) as r:
                    self.reads.append(metric(r.read().decode(), ADAPTER_REQUESTS))
            except (urllib.error.URLError, OSError) as e:
                self.unread.append(repr(e))  # a roll owes every scrape an answer
            time.sleep(0.02)

    @contextmanager
    def running(self) -> Iterator[Traffic]:
        threads = [threading.Thread(target=t) for t in (self._client, self._scraper)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            yield self
            time.sleep(0.5)
        finally:
            self._stop.set()
            for thread in threads:
                thread.join()

    def went_back(self) -> list[tuple[float, float]]:
        return [(a, b) for a, b in zip(self.reads, self.reads[1:], strict=False) if b < a]


def _delete(daemon: Daemon, bundle: str) -> None:
    req = urllib.request.Request(
        f"{daemon.url}/v1/bundles/{bundle}", method="DELETE",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as answer:
        assert answer.status == 200


def test_a_roll_keeps_every_count(gateway: Daemon) -> None:
    before_pids = {w["pid"] for w in until_serving(gateway, 2)}
    before = gateway.metric(ADAPTER_REQUESTS)
    page_before = _page_requests(gateway)
    traffic = Traffic(gateway)
    with traffic.running():
        _delete(gateway, "digits-zig")  # answers once both workers were replaced
    after_pids = {w["pid"] for w in until_serving(gateway, 2)}
    assert not before_pids & after_pids, "the workers were not replaced"
    assert traffic.failed == []
    assert traffic.unread == []
    assert traffic.went_back() == []
    # The old workers' last requests reach the count once they have ended.
    deadline = time.monotonic() + 30
    while gateway.metric(ADAPTER_REQUESTS) - before < traffic.answered:
        assert time.monotonic() < deadline, "the replaced workers' counts were lost"
        time.sleep(0.1)
    assert gateway.metric(ADAPTER_REQUESTS) - before == traffic.answered  # and none twice
    # The status page's row counts them too (no scraper of /metrics involved).
    assert _page_requests(gateway) - page_before == traffic.answered


def _page_requests(daemon: Daemon) -> int:
    rows = daemon.get_json("/v1/status")["models"]
    return sum(int(r["requests"]) for r in rows if (r["kind"], r["name"]) == ("adapter", "digits"))


def test_a_killed_worker_never_takes_the_counter_back(gateway: Daemon) -> None:
    victim = until_serving(gateway, 2)[0]["pid"]
    before = gateway.metric(ADAPTER_REQUESTS)
    traffic = Traffic(gateway)
    with traffic.running():
        time.sleep(0.5)
        os.kill(int(str(victim)), signal.SIGKILL)
        until_replaced(gateway, victim, timeout=30)
    assert len(traffic.unread) <= 1  # the scrape the killed worker was answering, if any
    assert traffic.went_back() == []
    # What the killed worker counted after the last scrape of it is lost; nothing else.
    assert gateway.metric(ADAPTER_REQUESTS) - before >= traffic.answered - 2 * len(traffic.reads)
    assert max(traffic.reads) <= gateway.metric(ADAPTER_REQUESTS)


def _control_socket(supervisor: int) -> str:
    """The supervisor's control socket: the ``control.sock`` it listens on."""
    mine = {str(fd.readlink()) for fd in Path(f"/proc/{supervisor}/fd").iterdir()}
    for path in Path(tempfile.gettempdir()).glob("wasmgate-*/control.sock"):
        inode = _unix_inode(str(path))
        if inode is not None and f"socket:[{inode}]" in mine:
            return str(path)
    raise AssertionError("no control socket of the supervisor")


def _unix_inode(path: str) -> str | None:
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == path:
            return fields[6]
    return None


def test_only_a_worker_hands_over_counts(gateway: Daemon) -> None:
    """Made-up counts would lift the gateway's counters for good (the floor keeps them):
    the public port does not take them, and on the control socket only a worker's pid
    (SO_PEERCRED) is heard."""
    forged = b'wasmgate_requests_total{kind="adapter",name="digits"} 1e9\n'
    public = urllib.request.Request(f"{gateway.url}/v1/retired", data=forged)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(public, timeout=10)
    assert refused.value.code == 404
    refused.value.close()
    assert gateway.proc is not None
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(_control_socket(gateway.proc.pid))
        head = f"POST /v1/retired HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(forged)}\r\n"
        head += "\r\n"
        sock.sendall(head.encode() + forged)
        assert sock.recv(4096).split(b"\r\n", 1)[0] == b"HTTP/1.1 403 Forbidden"
    assert gateway.metric(ADAPTER_REQUESTS) < 1e9


def test_status_says_what_changed_once_the_workers_serve_it(tmp_path: Path) -> None:
    """systemd's ``STATUS=`` names what the gateway serves: after a removal it changes
    only once both workers were replaced (the supervisor applies a change seconds before
    its workers serve it)."""
    sock = NotifySocket(tmp_path / "notify")
    (tmp_path / "d").mkdir()
    config = {"workers": {"count": 2}, "http": {"management_token": TOKEN}}
    daemon = Daemon(tmp_path / "d", config, ("--demo",), {"NOTIFY_SOCKET": sock.address})
    try:
        with serving(daemon) as gateway:
            old = {w["pid"] for w in until_serving(gateway, 2)}
            ready = [d.fields["STATUS"] for d in sock.with_field("READY", "1")][-1]
            removal = threading.Thread(target=_delete, args=(gateway, "digits-zig"))
            removal.start()
            try:
                said = _next_status(sock, ready)
                workers = gateway.get_json("/v1/status")["components"]["workers"]["workers"]
            finally:
                removal.join()
            assert said != ready
            assert not {w["pid"] for w in workers} & old, f"STATUS {said!r} before the roll"
    finally:
        sock.close()


def _next_status(sock: NotifySocket, current: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        said = [d.fields["STATUS"] for d in sock.messages() if "STATUS" in d.fields]
        if said and said[-1] != current and "READY" not in said[-1]:
            return said[-1]
        time.sleep(0.005)
    raise AssertionError(f"no new STATUS after {current!r}: {sock.messages()}")

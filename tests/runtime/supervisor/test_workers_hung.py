"""A hung worker (`wasmgate.runtime.supervisor.children`, the watchdog): a worker whose event
loop stops answering is killed and replaced, the others serve meanwhile, the requests
queued for it are served by its successor, and the status page says what happened.

Hung from outside with SIGSTOP: the process holds its sockets and answers nothing, as a
worker stuck in native code or in a loop that never yields would."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.runtime.supervisor.workerkit import (
    SAMPLE,
    call_quietly,
    demo_gateway,
    until_replaced,
)

pytestmark = pytest.mark.timeout(300)
CLIENTS = 4


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with demo_gateway(tmp_path_factory, "hung") as daemon:
        yield daemon


def _state(pid: int) -> str | None:
    """``/proc/<pid>/stat``'s state letter (``T`` stopped, ``Z`` a zombie), None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _workers(gateway: Daemon) -> list[dict[str, object]]:
    found: list[dict[str, object]] = gateway.get_json("/v1/status")["components"]["workers"][
        "workers"
    ]
    return found


def _quick(gateway: Daemon) -> int:
    """One request that gives up after a second (-1): a connection the kernel hashed to the
    hung worker's socket waits, one hashed to the other worker's is answered."""
    req = urllib.request.Request(f"{gateway.url}/v1/adapters/digits", data=SAMPLE)
    try:
        with urllib.request.urlopen(req, timeout=1.0) as answer:
            answer.read()
            return int(answer.status)
    except (urllib.error.URLError, OSError):
        return -1


def test_a_hung_worker_is_killed_and_replaced_and_its_queue_is_served(gateway: Daemon) -> None:
    victim = _workers(gateway)[0]
    pid = int(str(victim["pid"]))
    patient: list[int] = []  # statuses of clients that wait as long as it takes
    quick: list[tuple[float, int]] = []  # (sent, status) of requests that wait 1 s at most
    stop = threading.Event()

    def wait_for_answers() -> None:
        while not stop.is_set():
            patient.append(call_quietly(gateway))  # a fresh connection each

    def ask_quickly() -> None:
        while not stop.is_set():
            quick.append((time.monotonic(), _quick(gateway)))

    clients = [threading.Thread(target=wait_for_answers) for _ in range(CLIENTS)]
    clients += [threading.Thread(target=ask_quickly) for _ in range(4)]
    for client in clients:
        client.start()
    try:
        time.sleep(0.5)
        log_at = len(gateway.log())
        os.kill(pid, signal.SIGSTOP)
        hung = time.monotonic()
        gateway.wait_log("worker 0 hung: no answer for 5 s, killed", since=log_at, timeout=30)
        back = until_replaced(gateway, victim["pid"], timeout=60)
        took = time.monotonic() - hung
        time.sleep(0.5)
    finally:
        stop.set()
        for client in clients:
            client.join()
        if _state(pid) == "T":  # the watchdog failed: leave no stopped process behind
            os.kill(pid, signal.SIGKILL)
    assert _state(pid) is None, "the hung worker was not killed and reaped"
    worker = next(w for w in back if w["index"] == 0)
    assert str(worker["last_exit"]).startswith("killed by the watchdog"), worker
    assert int(str(worker["restarts"])) >= 1
    assert took < 60.0
    # While it hung (the watchdog waits 5 s), the other worker answered what reached it:
    # each quick request is a coin toss of the kernel's hash, ~16 or more in these 4 s.
    during = [s for t, s in quick if hung + 0.5 < t < hung + 4.5]
    assert during.count(200) >= 2, during
    # What queued on the hung worker's socket was answered by its successor; only a request
    # the hung process had already taken in (one per client at most) was lost with it. The
    # successor takes the whole backlog at once (the quick requests that gave up included),
    # so admission may refuse some as busy: a clear answer (a CI run: 3 lost, 3 busy).
    lost = [s for s in patient if s == -1]
    assert len(lost) <= CLIENTS, patient
    assert {s for s in patient if s != -1} <= {200, 429}, patient
    assert patient.count(200) > 20


def test_a_busy_worker_is_not_mistaken_for_a_hung_one(gateway: Daemon) -> None:
    """The watchdog asks the worker's event loop, not whether its requests are quick:
    minutes of steady load on every worker kill none of them."""
    before = {int(str(w["pid"])) for w in _workers(gateway)}
    stop = threading.Event()
    statuses: list[int] = []

    def load() -> None:
        while not stop.is_set():
            statuses.append(call_quietly(gateway))

    clients = [threading.Thread(target=load) for _ in range(8)]
    for client in clients:
        client.start()
    try:
        time.sleep(8.0)  # longer than the watchdog's 5 s
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert {int(str(w["pid"])) for w in _workers(gateway)} == before
    assert set(statuses) == {200}, {s for s in statuses if s != 200}

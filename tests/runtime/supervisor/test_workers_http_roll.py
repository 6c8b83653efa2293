"""No HTTP client sees a failure while the workers are replaced (``[workers] count = 2``).

A roll stops each old worker's listener while clients keep connecting. A connection the
old worker had already taken from the kernel (accepted, or in the middle of being handed
to the server, or of its TLS handshake) must still be answered: before the fix, one that
arrived just before the listener closed was closed unanswered when the worker found no
open connection left ("Remote end closed connection without response"), or, accepted by
the kernel a moment before the server closed, was neither served nor closed (a reset)."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.runtime.supervisor.workerkit import digits_gateway, until_serving

pytestmark = pytest.mark.timeout(300)
TOKEN = "roll-token"
ROLLS = 4
CLIENTS = 4


@pytest.fixture
def gateway(tmp_path: Path, models: Any) -> Iterator[tuple[Daemon, BenchKit]]:
    with digits_gateway(tmp_path, models, http={"management_token": TOKEN}, drain_s=4) as both:
        yield both


class Pollers:
    """``CLIENTS`` threads asking ``/v2/health/ready`` on a fresh connection each time,
    as the many clients of a gateway do; every failure is kept with its cause."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.answered = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._poll) for _ in range(CLIENTS)]

    def _poll(self) -> None:
        while not self._stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            phase = "connect"
            try:
                conn.connect()
                phase = "request"
                conn.request("GET", "/v2/health/ready")
                phase = "response"
                answer = conn.getresponse()
                answer.read()
                if answer.status == 200:
                    self.answered += 1
                else:
                    self.failures.append(f"status {answer.status}")
            except (OSError, http.client.HTTPException) as e:
                self.failures.append(f"{phase}: {e!r}")
            finally:
                conn.close()

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def _install(daemon: Daemon, data: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=120)
    try:
        conn.request("PUT", "/v1/bundles", data, {"Authorization": f"Bearer {TOKEN}"})
        answer = conn.getresponse()
        assert answer.status in {200, 201}, answer.read()
    finally:
        conn.close()


def test_fresh_connections_through_rolls_are_all_answered(
    gateway: tuple[Daemon, BenchKit], models: Any, tmp_path: Path
) -> None:
    daemon, kit = gateway
    versions = [
        kit.build("digits", models.digits_fp32, version=v, out_dir=tmp_path).read_bytes()
        for v in range(2, 2 + ROLLS)
    ]
    replaced: set[object] = set()
    with Pollers(daemon.port) as pollers:
        for data in versions:
            replaced |= {w["pid"] for w in until_serving(daemon, 2)}
            _install(daemon, data)  # answers once both workers were replaced
    now = {w["pid"] for w in until_serving(daemon, 2)}
    assert not now & replaced, "the workers were not replaced"
    assert pollers.answered > 100
    assert pollers.failures == []

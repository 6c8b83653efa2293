"""A client's mistakes logged as one gateway's with ``[workers] count = 2``: a 4xx answer
is logged at most once a minute per transport and status whichever worker answered it
(`wasmgate.runtime.ops.throttle_shared`), as one process logs it; per process, a gateway
of N workers wrote the line N times."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.runtime.supervisor.test_workers import call, cpu_ticks, until_serving
from wasmgate.runtime.ops.throttle_shared import ROWS, SharedThrottle

pytestmark = pytest.mark.timeout(300)
NOT_FOUND = re.compile(r" wasmgate\.requests: http adapter nope\d* -> 404 ")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path_factory.mktemp("workers-logs"), {"workers": {"count": 2}})
    daemon.start(timeout=240)
    try:
        until_serving(daemon, 2)
        yield daemon
    finally:
        daemon.stop()


def test_a_client_error_is_logged_once_a_minute_for_the_whole_gateway(gateway: Daemon) -> None:
    pids = [w["pid"] for w in until_serving(gateway, 2)]
    before = [cpu_ticks(p) for p in pids]
    # Fresh connections each: the kernel spreads them over both workers' sockets.
    statuses = [call(gateway, f"/v1/adapters/nope{i}", b"{}") for i in range(200)]
    assert statuses == [404] * 200
    used = [cpu_ticks(p) - b for p, b in zip(pids, before, strict=True)]
    assert min(used) >= 2, f"one worker answered (almost) nothing: CPU ticks {used}"
    assert gateway.get_json("/v1/status")["errors"]["total"] >= 200  # every one kept
    assert len(NOT_FOUND.findall(gateway.log())) == 1, gateway.log()


def test_the_table_is_one_decision_for_every_process(tmp_path: Path) -> None:
    """Two views of one file (two processes' ``open``): one line per period, the next one
    carries how many were left out in either."""
    path = tmp_path / "log-limits"
    one, other = SharedThrottle(path), SharedThrottle(path)
    try:
        assert one.admit("http 404", 100.0, 60.0) == 0
        assert other.admit("http 404", 101.0, 60.0) is None
        assert one.admit("http 404", 159.0, 60.0) is None
        assert other.admit("mqtt 404", 101.0, 60.0) == 0  # keys apart
        assert other.admit("http 404", 160.0, 60.0) == 2
        assert one.admit("http 404", 161.0, 60.0) is None
    finally:
        one.close()
        other.close()
    assert one.admit("http 404", 162.0, 60.0) == 0  # closed: logged, never lost


def test_a_full_table_logs_as_one_process_would(tmp_path: Path) -> None:
    table = SharedThrottle(tmp_path / "log-limits")
    try:
        assert all(table.admit(f"key {i}", 1.0, 60.0) == 0 for i in range(ROWS))
        assert table.admit("one more", 1.0, 60.0) == 0
        assert table.admit("one more", 2.0, 60.0) == 0  # not counted: no row for it
        assert table.admit("key 0", 2.0, 60.0) is None
    finally:
        table.close()

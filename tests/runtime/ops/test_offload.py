"""The event loop's default executor (`wasmgate.runtime.ops.offload`): every thread the
daemon will have runs once it serves, so a steady daemon's thread set is its start-up set
(the soak's exact thread check, issue 49).

The real daemon is driven through the path that grew asyncio's own executor: blocking
jobs off the loop that overlap (V2 bodies over ``OFFLOAD_BYTES`` are decoded by
``asyncio.to_thread``, many at once), and its threads compared by name before and after
(Python's names through a test-only probe, the kernel's from ``/proc``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.thread_names import native_threads, probe_env, python_threads
from wasmgate.runtime.dataplane.plane import OFFLOAD_BYTES
from wasmgate.runtime.ops.offload import NAME, Offload, install, size_for

CLIENTS = 16
ROUNDS = 4


def _big_body() -> bytes:
    """A V2 JSON request over `OFFLOAD_BYTES` (decoded off the loop; its shape is wrong
    for the model, so the answer is a 400 after the decode)."""
    n = OFFLOAD_BYTES // 4
    body = {"inputs": [{"name": "x", "shape": [n], "datatype": "FP32", "data": [0.5] * n}]}
    data = json.dumps(body).encode()
    assert len(data) > OFFLOAD_BYTES
    return data


def daemon_cpus(daemon: Daemon) -> int:
    return len(daemon.get_json("/v1/status")["components"]["cpus"]["allowed"])


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _overlapping_decodes(daemon: Daemon) -> set[int]:
    """``CLIENTS`` clients at once, ``ROUNDS`` large bodies each: the statuses seen."""
    body, url = _big_body(), f"{daemon.url}/v2/models/digits/infer"
    with ThreadPoolExecutor(CLIENTS) as clients:
        return set(clients.map(lambda _: _post(url, body), range(CLIENTS * ROUNDS)))


@pytest.mark.timeout(300)
def test_overlapping_offloads_start_no_thread(tmp_path: Path) -> None:
    env = probe_env(tmp_path)
    (tmp_path / "daemon").mkdir()
    daemon = Daemon(tmp_path / "daemon", {}, ("--demo",), env)
    daemon.start(timeout=180)
    try:
        assert daemon.proc is not None
        before_py = python_threads(daemon)
        before_os = native_threads(daemon.proc.pid)
        assert _overlapping_decodes(daemon) == {400}  # decoded, then refused by shape
        assert python_threads(daemon) == before_py
        assert native_threads(daemon.proc.pid) == before_os
        offload = {n for n in before_py if n.startswith(NAME)}
        assert offload == {f"{NAME}_{i}" for i in range(size_for(daemon_cpus(daemon)))}
        assert daemon.get_json("/v2/health/live") is not None  # still serving
    finally:
        daemon.stop()


def test_pool_runs_every_thread_once_built() -> None:
    pool = Offload(3, name="offload-test")
    try:
        names = {t.name for t in threading.enumerate() if t.name.startswith("offload-test")}
        assert names == {f"offload-test_{i}" for i in range(3)}
        hold = threading.Event()
        jobs = [pool.submit(hold.wait, 10) for _ in range(6)]  # more jobs than threads
        after = {t.name for t in threading.enumerate() if t.name.startswith("offload-test")}
        assert after == names  # queued behind the three, no fourth thread
        hold.set()
        assert all(j.result(timeout=10) for j in jobs)
    finally:
        pool.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("offload-test")]


def test_install_is_the_loops_default_executor() -> None:
    async def main(check: Callable[[], str]) -> str:
        install(asyncio.get_running_loop(), 1)
        return await asyncio.to_thread(check)

    name = asyncio.run(main(lambda: threading.current_thread().name))
    assert name.startswith(f"{NAME}_")
    assert not [t for t in threading.enumerate() if t.name.startswith(NAME)]  # shut down
    assert (size_for(1), size_for(2), size_for(64)) == (5, 6, 32)  # asyncio's rule, our CPUs

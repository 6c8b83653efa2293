"""Compile bomb at install, against a real daemon: refused within its budget, others go on.

A signed bundle whose adapter is `compile_bomb` (~24 KiB of wasm that compiles for minutes)
is PUT to the management API of a daemon with ``limits.compile_timeout_s = BUDGET_S``. While
it compiles (in a child process), a second bundle is PUT and must be installed first: the
bomb holds no lock the other install needs. The bomb is answered 422 naming the budget key
that ended it (time or memory), within the time budget plus slack; the tenant already
serving answers throughout.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import TOKEN, digits_payload, post, put_bundle, wait_until
from tests.sandbox.helpers import compile_bomb

BUDGET_S = 8.0
SLACK_S = 10.0  # child start, kill, reaping, and the staging before the compile


def _compiling(pid: int) -> bool:
    """A compiler child of the daemon is running (sandbox/compile_child.py)."""
    children: list[str] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children += (task / "children").read_text().split()
    for child in children:
        with contextlib.suppress(OSError):
            if b"compile_child" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
    return False


def _timed_put(daemon: Daemon, data: bytes) -> tuple[int, bytes, float]:
    status, body = put_bundle(daemon, data)
    return status, body, time.monotonic()


@pytest.mark.timeout(180)
def test_compile_bomb_refused_within_budget_while_another_bundle_installs(
    kit: BenchKit, models: object, tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    # Either budget may end the bomb (on a quiet machine memory runs out first); the memory
    # budget is raised so that it cannot end before the second install has begun.
    limits = {"compile_timeout_s": BUDGET_S, "compile_memory_mb": 4096}
    extra = {"limits": limits, "http": {"management_token": TOKEN}}
    daemon = daemon_factory(config=kit.config(extra))
    wasm = tmp_path / "bomb.wasm"
    wasm.write_bytes(compile_bomb())
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    digits = models.digits_fp32  # type: ignore[attr-defined]
    bomb = kit.build("bomb", digits, out_dir=uploads, wasm=wasm).read_bytes()
    other = kit.build("other", digits, out_dir=uploads).read_bytes()

    with ThreadPoolExecutor(2) as clients:
        start = time.monotonic()
        bomb_put = clients.submit(_timed_put, daemon, bomb)
        assert daemon.proc is not None
        pid = daemon.proc.pid
        wait_until(lambda: _compiling(pid) or bomb_put.done(), 60, "the bomb compiling")
        assert not bomb_put.done(), bomb_put.result()
        other_status, other_body, other_done = clients.submit(_timed_put, daemon, other).result()
        served = post(f"{daemon.url}/v1/adapters/digits", digits_payload())[0]
        bomb_status, bomb_body, bomb_done = bomb_put.result()

    assert other_status == 201, other_body
    assert other_done < bomb_done, "the second install waited for the bomb's compile"
    assert served == 200
    assert bomb_status == 422, bomb_body
    error = json.loads(bomb_body)["error"]
    assert "compile_timeout_s" in error or "compile_memory_mb" in error, error
    assert bomb_done - start < BUDGET_S + SLACK_S
    assert post(f"{daemon.url}/v1/adapters/other", digits_payload())[0] == 200
    assert post(f"{daemon.url}/v1/adapters/bomb", digits_payload())[0] == 404

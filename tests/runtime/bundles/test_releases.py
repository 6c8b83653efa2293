"""Staged releases on a real daemon subprocess: durable share, sticky split, pinning, abort.

A staged candidate's side is a hash of the request's canary key, so the same keys must land
on the same versions before and after a restart (clean or SIGKILL): the tests compare the
whole key -> version map, which is deterministic, and bound the share loosely (400 keys at
10 %: 40 expected, standard deviation 6; the bounds are 4 standard deviations away).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.runtime.bundlekit import BundleKit
from tests.runtime.bundles.releases import TOKEN, ask, call, entry, manage, put, sides, start

KEYS = [f"device-{i}" for i in range(400)]


@pytest.fixture
def staged(kit: BundleKit, tmp_path: Path, daemon_factory: Callable[..., Daemon]) -> Daemon:
    """probe v1 serving, v2 staged at 10 %."""
    daemon = start(daemon_factory, kit, tmp_path)
    assert put(daemon, kit.build("probe", 1))[0] == 201
    status, body = put(daemon, kit.build("probe", 2), stage=10)
    assert (status, body["percent"]) == (201, 10), body
    return daemon


def _share(split: dict[str, str]) -> int:
    return sum(v == "2" for v in split.values())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_share_and_sides_survive_a_restart(staged: Daemon, stop: str) -> None:
    before = sides(staged, KEYS)
    assert 16 <= _share(before) <= 64, _share(before)
    assert sides(staged, KEYS[:50]) == {k: before[k] for k in KEYS[:50]}  # sticky
    staged.stop() if stop == "sigterm" else staged.kill()
    staged.start()
    assert sides(staged, KEYS) == before
    found = entry(staged)
    assert (found["version"], found["staged"]["version"], found["staged"]["percent"]) == (1, 2, 10)


@pytest.mark.timeout(120)
def test_request_id_is_a_key_and_no_key_is_random(staged: Daemon) -> None:
    by_request_id = {}
    for key in KEYS[:100]:
        status, got, _ = call(staged, "POST", "/v1/adapters/probe", b"Px", {"X-Request-Id": key})
        assert status == 200
        by_request_id[key] = got["X-Wasmgate-Version"]
    assert by_request_id == sides(staged, KEYS[:100])


@pytest.mark.timeout(120)
def test_pinning_by_version(staged: Daemon) -> None:
    for version in ("1", "2"):
        for key in KEYS[:10]:
            status, got, body = ask(staged, key, version)
            assert (status, got, body) == (200, version, f"v{version}:x".encode())
    status, _, body = ask(staged, version="3")
    assert status == 404
    assert b"'probe' version 3 is not found (bundle 'probe': serving 1, staged 2)" in body
    status, _, body = ask(staged, version="two")
    assert status == 400
    # the V2 route pins through its URL
    status, _, _ = call(staged, "GET", "/v2/models/probe/versions/2")
    assert status == 200


@pytest.mark.timeout(180)
def test_abort_then_the_current_version_installs_again(staged: Daemon, kit: BundleKit) -> None:
    status, body = manage(staged, "POST", "/v1/bundles/probe/abort")
    assert (status, body["aborted"]["version"]) == (200, 2), body
    assert set(sides(staged, KEYS[:100]).values()) == {"1"}
    assert "staged" not in entry(staged)
    assert manage(staged, "POST", "/v1/bundles/probe/abort")[0] == 404
    assert put(staged, kit.root / "probe-1.wgb")[0] == 201  # floor still 1: no 422
    staged.kill()
    staged.start()
    assert set(sides(staged, KEYS[:100]).values()) == {"1"}
    assert "staged" not in entry(staged)
    # and the same candidate can be staged again (its version is above the floor)
    assert put(staged, kit.root / "probe-2.wgb", stage=50)[0] == 201


@pytest.mark.timeout(180)
def test_promote_raises_the_floor_and_survives_sigkill(staged: Daemon, kit: BundleKit) -> None:
    assert put(staged, kit.root / "probe-1.wgb")[0] == 201  # staged v2 blocks nothing
    status, body = manage(staged, "POST", "/v1/bundles/probe/promote")
    assert (status, body["promoted"]["version"]) == (200, 2)
    staged.kill()
    staged.start()
    assert set(sides(staged, KEYS[:50]).values()) == {"2"}
    status, body = put(staged, kit.root / "probe-1.wgb")
    assert status == 422, body
    assert "rollback" in body["error"]


@pytest.mark.timeout(400)
def test_in_flight_requests_finish_on_an_aborted_candidate(
    kit: BundleKit, tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    # a loaded machine may take many seconds for the spin: no deadline may end it first
    daemon = start(daemon_factory, kit, tmp_path, limits={"deadline_ms": 300_000})
    slow = {"limits": {"deadline_ms": 300_000}}
    assert put(daemon, kit.build("probe", 1, sections=slow))[0] == 201
    assert put(daemon, kit.build("probe", 2, sections=slow), stage=10)[0] == 201
    answers: list[tuple[int, str | None, bytes]] = []
    # 'W' spins (about a second per thousand when idle); pinned to the candidate
    worker = threading.Thread(target=lambda: answers.append(ask(daemon, None, "2", b"W1000")))
    worker.start()
    try:
        for _ in range(2000):
            if entry(daemon)["staged"]["in_flight"] == 1:
                break
        else:
            pytest.fail("the pinned request never started")
        assert manage(daemon, "POST", "/v1/bundles/probe/abort")[0] == 200
        assert "staged" not in entry(daemon)
    finally:
        worker.join(300)
    assert answers == [(200, "2", b"v2:1000")]


@pytest.mark.timeout(120)
def test_cli_stages_lists_and_aborts(staged: Daemon, kit: BundleKit) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "wasmgate", "release", "--url", staged.url, *args]
        env = {**os.environ, "WASMGATE_TOKEN": TOKEN}
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)

    three = kit.build("probe", 3)
    done = cli("stage", str(three), "--percent", "20", "--max-error-share", "0.2")
    assert done.returncode == 0, done.stderr
    found = entry(staged)["staged"]
    assert (found["version"], found["percent"], found["gates"]["max_error_share"]) == (3, 20, 0.2)
    assert json.loads(cli("list").stdout)["bundles"][0]["staged"]["version"] == 3
    assert cli("abort", "probe").returncode == 0
    again = cli("abort", "probe")
    assert again.returncode == 1
    assert "404: bundle 'probe' has no staged version" in again.stderr

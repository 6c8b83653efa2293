"""The samples' hourly cap holds for the gateway, not per worker process, and across a
restart: a real daemon with ``[workers] count = 2`` asked for fallback from many
connections at once (the kernel spreads them over both workers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.runtime.field.test_samples_daemon import _ask, _cli, _daemon
from tests.runtime.supervisor.workerkit import until_serving

CAP = 3
KEEP = {"keep_payload": True, "rate": 1.0, "max_per_hour": CAP}
ASKED = 24


def test_two_workers_keep_no_more_than_the_cap_and_a_restart_keeps_counting(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    daemon = _daemon(tmp_path, daemon_factory, {"probe": {"samples": KEEP}}, workers={"count": 2})
    until_serving(daemon, 2)
    with ThreadPoolExecutor(8) as pool:  # a connection each: both workers take some
        answers = list(pool.map(lambda i: _ask(daemon, "probe", f"F-{i}".encode()), range(ASKED)))
    assert {status for status, _, _ in answers} == {200}
    assert len(json.loads(_cli(daemon, "list", "--json"))) == CAP
    samples = daemon.get_json("/v1/status")["components"]["samples"]
    assert samples["kept"] == CAP  # the status page adds up every worker's card
    assert samples["skipped"]["hourly"] == ASKED - CAP

    daemon.stop()
    daemon.start(timeout=240)
    until_serving(daemon, 2)
    assert _ask(daemon, "probe", b"F-after-restart")[0] == 200
    assert len(json.loads(_cli(daemon, "list", "--json"))) == CAP  # still the same hour
    assert daemon.get_json("/v1/status")["components"]["samples"]["skipped"]["hourly"] == 1

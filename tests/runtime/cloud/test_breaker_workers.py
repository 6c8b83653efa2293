"""The cloud breaker of a gateway with ``[workers] count = 2`` is the gateway's: a cloud
answering 503 gets ``breaker_failures`` calls from it, not that many from each process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.runtime.bundlekit import BundleKit
from tests.runtime.cloud.test_daemon_fallback import (
    FALLBACK,
    FailingCloud,
    _breaker_gauge,
    _post,
    _start,
)
from tests.runtime.supervisor.workerkit import cpu_ticks, until_serving

FAILURES = 3


def test_two_workers_open_one_breaker(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BundleKit(tmp_path / "kit")
    bundle = kit.build("probe", 1, tag="edge", sections={"fallback": FALLBACK})
    breaker = {"breaker_failures": FAILURES, "breaker_reset_s": 3600}
    with FailingCloud() as cloud:
        cfg = {"cloud": {"url": cloud.url, **breaker}, "workers": {"count": 2}}
        edge = _start(daemon_factory, tmp_path, kit, "edge", bundle, **cfg)
        pids = [w["pid"] for w in until_serving(edge, 2)]
        ticks = [cpu_ticks(p) for p in pids]
        # One request at a time, each on a connection of its own (the kernel spreads
        # them over both workers): the breaker opens after the gateway's third failure.
        statuses = [_post(f"{edge.url}/v1/adapters/probe", b"E")[0] for _ in range(40)]
        assert statuses == [500] * 40
        assert min(cpu_ticks(p) - t for p, t in zip(pids, ticks, strict=True)) > 0
        assert cloud.calls == FAILURES
        assert _breaker_gauge(edge) == 2  # open, as every process reads it
        card = edge.get_json("/v1/status")["components"]["cloud"]
        assert card["breaker"]["state"] == "open"
        assert card["breaker"]["opens"] == 1
        assert {w["breaker"] for w in card["workers"]} == {"open"}

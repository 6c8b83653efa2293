"""Three tenants against one real daemon: one floods, one abuses a slow model, one is normal.

- ``flood``: 32 closed-loop clients on a mobilenet adapter (``max_in_flight = 64``), far
  more work than the 4 workers can do;
- ``slow``: 6 closed-loop clients on a model that runs for an hour (a Loop of MatMuls),
  each request with a 300 ms deadline (``X-Wasmgate-Timeout-Ms``): every one must be a 504
  and its run must be stopped, not left holding a worker;
- ``digits``: the normal tenant, one request at a time, before and during the attacks.

Bound stated and checked: the normal tenant's error rate stays zero (as unloaded) and its
p99 under both attacks is at most ``FACTOR`` x its unloaded p99 + ``SLACK_S`` (10x + 0.5 s,
``tests.reliability.load``). Generous on purpose: the attackers' ONNX runs share the
machine's (2) cores with it. Without fair
scheduling its requests queued behind the flood's backlog; without run cancellation the
abuser's hour-long runs held the workers after their 504s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import digits_payload
from tests.reliability.load import (
    Flood,
    latency_bound,
    measure,
    steady_tenant,
    wait_for_load,
)
from tests.reliability.test_fairness import MOBILENET_X, flooding_kit
from tests.runtime.bundlekit import slow_model

SLOW_BODY = json.dumps(
    {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
).encode()
SLOW_HEADERS = {"Content-Type": "application/json", "X-Wasmgate-Timeout-Ms": "300"}


@pytest.mark.timeout(300)
def test_normal_tenant_unaffected_by_a_flood_and_a_slow_model_abuser(
    kit: BenchKit, models: object, tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    flooding_kit(kit, models)
    slow = tmp_path / "slow.onnx"
    slow.write_bytes(slow_model(1_000_000))  # an hour per run: only cancellation ends it
    kit.build("slow", slow, limits={"max_in_flight": 8, "queue_size": 8, "deadline_ms": 60_000})
    daemon = daemon_factory(config=kit.config({"limits": {"workers": 4}}))
    normal_url = f"{daemon.url}/v1/adapters/digits"
    flood_url = f"{daemon.url}/v1/adapters/flood"
    slow_url = f"{daemon.url}/v2/models/slow/infer"
    with steady_tenant(normal_url, digits_payload(), max_s=200) as normal:
        measure(normal, 5, timeout=60)  # warm-up
        unloaded = measure(normal, 40, timeout=60)
        with (
            Flood(flood_url, payload(MOBILENET_X), 32, max_s=150) as flood,
            Flood(slow_url, SLOW_BODY, 6, max_s=150, headers=SLOW_HEADERS) as abuser,
        ):
            wait_for_load(flood, 32, timeout=60)
            wait_for_load(abuser, 6, timeout=60)
            loaded = measure(normal, 60, timeout=60)

    bound = latency_bound(unloaded)
    report = (
        f"normal unloaded {unloaded.summary()}; loaded {loaded.summary()}; bound {bound:.3f}s; "
        f"flood {flood.tally.summary()}; slow {abuser.tally.summary()}"
    )
    print(report)
    assert loaded.errors == 0, report
    assert loaded.p(0.99) <= bound, report
    assert set(abuser.tally.statuses) == {504}, report  # every abuse ends at its deadline
    assert flood.tally.statuses[200] > 0, report

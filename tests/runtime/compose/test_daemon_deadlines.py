"""Against a real daemon: deadlines stop native work, and batching threads stay bounded.

Issue 13.1: six requests with a 300 ms deadline to a slow model used to keep every worker
busy for the model's whole run after their 504s, starving every other tenant. Issue 13.5:
a bundle with 64 batched models used to start a thread (or two) per model.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.fixtures.daemon import Daemon
from tests.fixtures.waits import until
from tests.runtime.backends.conftest import profile_text
from tests.runtime.bundlekit import BundleKit, slow_model
from tests.runtime.stack import host_profile_name

X = {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}


def _infer(daemon: Daemon, model: str, timeout_ms: int) -> tuple[int, Any]:
    body = json.dumps({"inputs": [X]}).encode()
    req = urllib.request.Request(
        f"{daemon.url}/v2/models/{model}/infer",
        data=body,
        headers={"Content-Type": "application/json", "X-Wasmgate-Timeout-Ms": str(timeout_ms)},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _metric(daemon: Daemon, series: str) -> float:
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0.0


def _wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    until(predicate, what, seconds, every_s=0.1)


def test_slow_model_deadlines_free_the_workers_for_other_tenants(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    slow = kit.root / "slow.onnx"
    slow.write_bytes(slow_model(1_000_000))  # an hour per run: only a terminate ends it
    kit.build(
        "abuser",
        1,
        adapter=False,
        model_name="slow",
        model_file=slow,
        batching={"max_batch_size": 1, "max_queue_delay_us": 0},
        sections={"limits": {"max_in_flight": 8, "queue_size": 8, "deadline_ms": 60_000}},
        out_dir=bundles,
    )
    kit.build("quiet", 1, adapter=False, model_name="double", out_dir=bundles)
    config = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "profile": host_profile_name(),
        "limits": {"workers": 4},  # six slow runs would hold all four without the watchdog
    }
    daemon = daemon_factory(config=config, name="d")

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _infer(daemon, "slow", 300), range(6)))
    assert [status for status, _ in answers] == [504] * 6, answers

    status, doc = _infer(daemon, "double", 5_000)  # the quiet tenant, within its deadline
    assert status == 200, doc
    assert doc["outputs"][0]["data"] == [2, 4, 6, 8]

    # The runs were stopped (not merely answered): every admission slot is free again, and
    # the runs that had started were terminated by the watchdog (the others never started).
    in_flight = 'wasmgate_in_flight{name="slow"}'
    _wait_for(lambda: _metric(daemon, in_flight) == 0, 60, "slow model's slots freed")
    cancelled = _metric(daemon, 'wasmgate_runs_cancelled_total{model="slow"}')
    assert 1 <= cancelled <= 6
    assert _infer(daemon, "slow", 300)[0] == 504  # still served the same way afterwards


def _threads(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return len(list(Path(f"/proc/{daemon.proc.pid}/task").iterdir()))


def _daemon_with_models(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], name: str, count: int
) -> Daemon:
    kit = BundleKit(tmp_path / f"kit-{name}")
    bundles = tmp_path / name / "data" / "bundles"
    bundles.mkdir(parents=True)
    names = tuple(f"m{i}" for i in range(count))
    batching = {"max_batch_size": 8, "max_queue_delay_us": 200}
    kit.build("many", 1, adapter=False, model_names=names, batching=batching, out_dir=bundles)
    # One intra-op thread per session: ONNX Runtime's Python API has no shared thread pool,
    # so its per-session pools are set aside here; what is counted is the daemon's own.
    profile = tmp_path / f"{name}-profile.toml"
    providers = '[{ name = "CPUExecutionProvider" }]'
    profile.write_text(profile_text(providers, "intra_op_threads = 1", '["fp32"]'))
    config = {
        "paths": {"trust_file": kit.save_trust(tmp_path / f"{name}-trust.json")},
        "profile": str(profile),
        "limits": {"workers": 4, "batch_workers": 2},
    }
    daemon = daemon_factory(config=config, name=name)
    with ThreadPoolExecutor(16) as pool:  # every batcher really serves
        answers = list(pool.map(lambda m: _infer(daemon, m, 30_000), names))
    assert {status for status, _ in answers} == {200}, answers
    return daemon


def test_batched_models_share_a_bounded_thread_pool(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    one = _threads(_daemon_with_models(tmp_path, daemon_factory, "one", 1))
    many = _threads(_daemon_with_models(tmp_path, daemon_factory, "many", 64))
    # 63 more batched models cost no thread of their own (was one or two per model); a few
    # threads of slack for ORT's and asyncio's lazily started helpers.
    assert many - one <= 4, (one, many)
    assert many < 64  # far below the unit's TasksMax=128

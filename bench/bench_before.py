"""This tree against an earlier one on the paths no change may slow, in one run.

``python -m bench.bench_before [--quick] [--json OUT]``

Two daemons serving the digits MLP behind the pass-through adapter, both connected to one
mosquitto (``set_tcp_nodelay true``) under their own gateway ids:

- **before**: the source tree of ``WASMGATE_BENCH_BEFORE_REV`` (default: the commit before
  ``runtime/dataplane/`` existed, when HTTP, gRPC and MQTT each had their own copy of the
  V2 path), laid out as the package and put first on ``PYTHONPATH`` (as `bench_tracing`).
- **now**: this tree.

Per round, on each daemon in turn (so load drift hits both alike): V2 JSON through ``wrk``
at 1 connection (p50) and 8 connections (req/s), the raw adapter at 1 connection (p50),
and MQTT 5 requests (a NODELAY, QoS 0 requester; closed loop) to the adapter and to the
model's V2 topic (p50). Each figure is the median over the rounds; the goal for every one
is at least 0.97x before (a p50 at most 1/0.97 of it). ``--quick`` runs one short round
(it checks that the scenario runs). Without an earlier tree (no git history, a shallow
clone) or when it does not start, the scenario says ``bench_before: skipping`` and has no
figures: a figure without its baseline would compare nothing.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from bench import bench_mqtt, wrk
from bench.common import Figure, median, script_main
from bench.trees import package_tree, rev_before
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker

Sample = Callable[[Daemon, str], float]
"""One measurement on a daemon (its MQTT gateway id given): a p50 in s, or req/s."""


def v2_json(x: np.ndarray) -> bytes:
    tensor = {"name": "input", "datatype": "FP32", "shape": list(x.shape),
              "data": x.ravel().tolist()}  # fmt: skip
    return json.dumps({"inputs": [tensor]}).encode()


def samplers(x: np.ndarray, broker: Broker, seconds: float) -> dict[str, Sample]:
    """What is measured, by the name of its figure."""
    body, raw = v2_json(x), payload(x)
    headers = {"Content-Type": "application/json"}

    def http(path: str, data: bytes, connections: int, rps: bool) -> Sample:
        def sample(d: Daemon, _gw: str) -> float:
            got = wrk.run(f"{d.url}{path}", data, headers, connections, seconds)
            return got.rps if rps else got.p50

        return sample

    def mqtt(topic: str, data: bytes) -> Sample:
        def sample(_d: Daemon, gw: str) -> float:
            where = f"wasmgate/v1/{gw}/{topic}"
            times = bench_mqtt.latencies(broker.port, where, data, seconds, bench_mqtt.NODELAY_QOS0)
            return median(times)

        return sample

    return {
        "V2 JSON p50, 1 connection": http("/v2/models/digits/infer", body, 1, rps=False),
        "V2 JSON req/s, 8 connections": http("/v2/models/digits/infer", body, 8, rps=True),
        "raw adapter p50, 1 connection": http("/v1/adapters/digits", raw, 1, rps=False),
        "MQTT adapter p50": mqtt("adapters/digits/req", raw),
        "MQTT V2 JSON model p50": mqtt("models/digits/infer", body),
    }


@contextmanager
def daemons(root: Path, broker: Broker) -> Iterator[dict[str, Daemon]]:
    """``now`` and (when its tree unpacks and starts) ``before``, keyed by gateway id."""
    kit = BenchKit(root / "kit")
    kit.build("digits", get_models().digits_fp32)
    envs: dict[str, dict[str, str]] = {"now": {}}
    rev = rev_before("runtime/dataplane/plane.py")
    if rev is None:
        print("bench_before: skipping: no earlier tree (git history) to compare with")
    else:
        envs["before"] = {"PYTHONPATH": str(package_tree(rev, root / "tree"))}
    with ExitStack() as stack:
        started = {}
        for gw, env in envs.items():
            mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": gw}
            daemon = kit.daemon(root / gw, config={"mqtt": mqtt}, env=env)
            stack.callback(daemon.stop)
            try:
                daemon.start(timeout=120)
            except RuntimeError as e:
                if gw == "now":
                    raise
                print(f"bench_before: skipping: the 'before' daemon did not start ({e})")
                continue
            started[gw] = daemon
        yield started


def run(quick: bool) -> list[Figure]:
    rounds, seconds = (1, 0.5) if quick else (5, 3.0)
    x = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        broker = Broker(Path(tmp) / "mosquitto", extra_conf=bench_mqtt.NODELAY_CONF)
        broker.start()
        try:
            with daemons(Path(tmp), broker) as stack:
                if "before" not in stack:
                    return []
                measured = samplers(x, broker, seconds)
                got: dict[tuple[str, str], list[float]] = {}
                for _ in range(rounds):
                    for name, sample in measured.items():
                        for gw, daemon in stack.items():
                            got.setdefault((name, gw), []).append(sample(daemon, gw))
        finally:
            broker.stop()
    figures = []
    for name in measured:
        rps = "req/s" in name
        now = median(got[(name, "now")])
        before = median(got[(name, "before")])
        scale = 1.0 if rps else 1e6
        figures.append(Figure(
            "before", f"{name}, now", now * scale, "/s" if rps else "us",
            f"{name}, before", before * scale, lower_is_better=not rps,
        ))  # fmt: skip
    return figures


def main() -> None:
    script_main(__doc__, run, "one short round")


if __name__ == "__main__":
    main()

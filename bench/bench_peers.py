"""wasmgate against a peer server on the same models, same client, same run.

``python -m bench.bench_peers [--quick] [--json OUT]``

- Seldon MLServer 1.7 (its own venv, see `bench.peers`) serves the digits and
  MobileNet-class ONNX files through a small custom ONNX Runtime runtime; a real
  ``wasmgate serve`` serves the same files (batching off on both). The same aiohttp
  closed-loop client sends the same KServe V2 **JSON** request (MLServer's REST API has no
  binary tensor extension) to ``/v2/models/<m>/infer`` on each, alternating servers per
  cell, at 1 and 8 clients. Baseline = MLServer (ratio < 1 on latency: wasmgate faster).
- Triton's ``perf_analyzer`` drives wasmgate's digits model (binary tensors, 1 client,
  count windows); baseline = the suite's own aiohttp client on the same request.

``ensure_peers(quick)`` installs the peers on first use; in ``--quick`` a peer whose venv
is not cached yet is skipped with the reason printed (installing takes minutes).
"""

from __future__ import annotations

import csv
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy.typing as npt

from bench import bench_http
from bench.bench_ladder import inputs, served
from bench.common import Figure, median, script_main
from bench.peers import MLSERVER, PERF_ANALYZER, MlServer, missing_system_libs, perf_analyzer_env
from bench.stack import BenchKit
from tests.fixtures.daemon import Daemon

Array = npt.NDArray[Any]


def json_body(x: Array) -> tuple[bytes, dict[str, str]]:
    req = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                       "data": x.ravel().tolist()}]}  # fmt: skip
    return json.dumps(req).encode(), {"Content-Type": "application/json"}


def versus_mlserver(
    daemon: Daemon, peer: MlServer, cases: dict[str, tuple[Path, Array]], seconds: float
) -> list[Figure]:
    figures: list[Figure] = []
    for name, (_, x) in cases.items():
        body, headers = json_body(x)
        unit, scale = ("us", 1e6) if name == "digits" else ("ms", 1e3)
        for clients in (1, 8):
            ours = served(f"{daemon.url}/v2/models/{name}/infer", body, headers,
                                       clients, seconds)  # fmt: skip
            theirs = served(f"{peer.url}/v2/models/{name}/infer", body, headers,
                                         clients, seconds)  # fmt: skip
            scenario = f"vs MLServer {name}"
            figures += [
                Figure(scenario, f"V2 JSON p50, {clients} client(s)", median(ours) * scale,
                       unit, "MLServer 1.7", median(theirs) * scale),
                Figure(scenario, f"V2 JSON req/s, {clients} client(s)", len(ours) / seconds,
                       "/s", "MLServer 1.7", len(theirs) / seconds, lower_is_better=False),
            ]  # fmt: skip
    return figures


def perf_analyzer(daemon: Daemon, x: Array, requests: int, out: Path) -> dict[str, float]:
    venv = PERF_ANALYZER.ensure()
    cmd = [str(venv / "bin" / "perf_analyzer"), "-m", "digits", "-u", daemon.url.split("//")[1],
           "-i", "http", "--concurrency-range", "1", "--measurement-mode", "count_windows",
           "--measurement-request-count", str(requests), "-s", "50", "-f", str(out)]  # fmt: skip
    done = subprocess.run(cmd, env=perf_analyzer_env(venv), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with out.open() as f:
        row = next(csv.DictReader(f))
    del x
    return {"req/s": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]) / 1e6}


def with_perf_analyzer(daemon: Daemon, x: Array, quick: bool, tmp: Path) -> list[Figure]:
    pa = perf_analyzer(daemon, x, 50 if quick else 500, tmp / "pa.csv")
    body, headers = bench_http.v2_body(x, "input")
    seconds = 0.5 if quick else 5.0
    ours = served(f"{daemon.url}/v2/models/digits/infer", body, headers, 1, seconds)
    return [
        Figure("perf_analyzer", "digits V2 binary p50, 1 client", pa["p50"] * 1e6, "us",
               "suite client", median(ours) * 1e6),
        Figure("perf_analyzer", "digits V2 binary req/s, 1 client", pa["req/s"], "/s",
               "suite client", len(ours) / seconds, lower_is_better=False),
    ]  # fmt: skip


def available(quick: bool) -> dict[str, str | None]:
    """Peer name -> None when it will run, else why it is skipped (quick mode only)."""
    why: dict[str, str | None] = {}
    for peer in (MLSERVER, PERF_ANALYZER):
        missing = missing_system_libs() if peer is PERF_ANALYZER else []
        if missing:
            why[peer.name] = f"missing system library: {', '.join(missing)}"
        elif quick and not peer.cached:
            why[peer.name] = f"not installed in {peer.venv} yet (run the full suite once)"
        else:
            why[peer.name] = None
    return why


def run(quick: bool) -> list[Figure]:
    """MLServer and perf_analyzer figures; skips (quick) are printed, never silent."""
    why = available(quick)
    for name, reason in why.items():
        if reason is not None:
            print(f"bench_peers: skipping {name}: {reason}", flush=True)
    cases = inputs()
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        kit = BenchKit(root / "kit")
        for name, (path, _) in cases.items():
            kit.build(name, path)
        daemon = kit.daemon(root / "daemon")
        daemon.start(timeout=120)
        try:
            if why[MLSERVER.name] is None:
                peer = MlServer(root / "mlserver", {k: v[0] for k, v in cases.items()})
                try:
                    peer.wait_ready(list(cases))
                    figures += versus_mlserver(daemon, peer, cases, 0.5 if quick else 5.0)
                finally:
                    peer.stop()
            if why[PERF_ANALYZER.name] is None:
                figures += with_perf_analyzer(daemon, cases["digits"][1], quick, root)
        finally:
            daemon.stop()
    return figures


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()

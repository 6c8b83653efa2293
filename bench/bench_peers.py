"""wasmgate against the bare ceiling and a peer server: same models, same client, same run.

``python -m bench.bench_peers [--quick] [--json OUT]``

- The **ceiling**: `bench.bare_server`, a bare aiohttp + ONNX Runtime V2 JSON handler (no
  validation, no sandbox, inference inline on the loop) with the daemon's session options.
- Seldon MLServer 1.7 (its own venv, see `bench.peers`) through a small custom ONNX
  Runtime runtime.
- A real ``wasmgate serve`` serving the same digits and MobileNet-class ONNX files (batching
  off everywhere). ``wrk -t1`` (`bench.wrk`) sends the same KServe V2 **JSON** request
  (MLServer's REST API has no binary tensor extension) to ``/v2/models/<m>/infer`` on each
  server in turn per cell: p50 at 1 connection, req/s at 8. Plus the daemon's raw adapter
  endpoint (the sandboxed path) at 1 connection against the ceiling's p50.
- The same MobileNet-class input to wasmgate as binary tensors (the V2 binary extension)
  against the JSON body: req/s at 8 connections, rounds alternating, with the daemon's
  CPU time per request beside each (read from ``/proc``): what a client saves the gateway
  by not spelling a megabyte of floats in JSON.
- Triton's ``perf_analyzer`` drives wasmgate's digits model (binary tensors, 1 client,
  count windows); baseline = wrk on the same request.

`Peer.ensure` installs a peer on first use; in ``--quick`` a peer whose venv is not cached
yet is skipped with the reason printed (installing takes minutes).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy.typing as npt

from bench import bench_http, wrk
from bench.bench_ladder import inputs
from bench.common import Figure, cpu_seconds, median, script_main
from bench.peers import (
    MLSERVER,
    PERF_ANALYZER,
    BareServer,
    MlServer,
    missing_system_libs,
    perf_analyzer,
)
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon

Array = npt.NDArray[Any]
CEILING = "bare aiohttp+ORT"


def json_body(x: Array) -> tuple[bytes, dict[str, str]]:
    req = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                       "data": x.ravel().tolist()}]}  # fmt: skip
    return json.dumps(req).encode(), {"Content-Type": "application/json"}


def versus(
    urls: dict[str, str], cases: dict[str, tuple[Path, Array]], seconds: float
) -> list[Figure]:
    """wasmgate (``urls["wasmgate"]``) against every other server in ``urls``, per model:
    p50 at 1 connection and req/s at 8, each cell run on every server in turn."""
    figures: list[Figure] = []
    for name, (_, x) in cases.items():
        body, headers = json_body(x)
        unit, scale = ("us", 1e6) if name == "digits" else ("ms", 1e3)
        for conns in (1, 8):
            got = {
                server: wrk.run(f"{url}/v2/models/{name}/infer", body, headers, conns, seconds)
                for server, url in urls.items()
            }
            ours = got.pop("wasmgate")
            for server, theirs in got.items():
                scenario = f"{name} V2 JSON vs {server}"
                figures.append(
                    Figure(scenario, "p50, 1 connection", ours.p50 * scale, unit, server,
                           theirs.p50 * scale)
                    if conns == 1 else
                    Figure(scenario, "req/s, 8 connections", ours.rps, "/s", server,
                           theirs.rps, lower_is_better=False)
                )  # fmt: skip
    return figures


def raw_adapter(daemon: Daemon, bare: BareServer, x: Array, seconds: float) -> Figure:
    """The sandboxed raw adapter endpoint against the ceiling's V2 JSON, 1 connection."""
    ours = wrk.run(f"{daemon.url}/v1/adapters/digits", payload(x), {}, 1, seconds)
    body, headers = json_body(x)
    theirs = wrk.run(f"{bare.url}/v2/models/digits/infer", body, headers, 1, seconds)
    return Figure("digits raw adapter (sandboxed)", "p50, 1 connection", ours.p50 * 1e6, "us",
                  CEILING, theirs.p50 * 1e6)  # fmt: skip


def binary_vs_json(daemon: Daemon, x: Array, seconds: float, rounds: int) -> list[Figure]:
    """req/s and CPU per request of the binary extension against JSON, same model, same
    daemon, 8 connections, ``rounds`` alternating rounds (medians)."""
    if daemon.proc is None:
        raise RuntimeError("daemon not running")
    url = f"{daemon.url}/v2/models/mobilenet/infer"
    bodies = {"json": json_body(x), "binary": bench_http.v2_body(x, "input")}
    rps: dict[str, list[float]] = {k: [] for k in bodies}
    cpu_ms: dict[str, list[float]] = {k: [] for k in bodies}
    for _ in range(rounds):
        for kind, (body, headers) in bodies.items():
            before = cpu_seconds(daemon.proc.pid)
            got = wrk.run(url, body, headers, 8, seconds)
            rps[kind].append(got.rps)
            cpu_ms[kind].append((cpu_seconds(daemon.proc.pid) - before) / got.requests * 1e3)
    scenario = "mobilenet V2 binary vs JSON"
    return [
        Figure(scenario, "req/s, 8 connections", median(rps["binary"]), "/s", "JSON",
               median(rps["json"]), lower_is_better=False),
        Figure(scenario, "daemon CPU per request", median(cpu_ms["binary"]), "ms", "JSON",
               median(cpu_ms["json"])),
    ]  # fmt: skip


def with_perf_analyzer(daemon: Daemon, x: Array, quick: bool, tmp: Path) -> list[Figure]:
    url = daemon.url.split("//")[1]
    # --quick only checks that it runs: a loaded machine must not fail it on stability.
    pa = perf_analyzer(url, "digits", 50 if quick else 500, tmp / "pa.csv",
                       stability=1000 if quick else 50)  # fmt: skip
    body, headers = bench_http.v2_body(x, "input")
    ours = wrk.run(f"{daemon.url}/v2/models/digits/infer", body, headers, 1,
                   0.5 if quick else 5.0)  # fmt: skip
    return [
        Figure("perf_analyzer", "digits V2 binary p50, 1 client", pa["p50"] * 1e6, "us",
               "wrk", ours.p50 * 1e6),
        Figure("perf_analyzer", "digits V2 binary req/s, 1 client", pa["req/s"], "/s",
               "wrk", ours.rps, lower_is_better=False),
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
    """Ceiling, MLServer and perf_analyzer figures; skips (quick) are printed, never silent."""
    why = available(quick)
    for name, reason in why.items():
        if reason is not None:
            print(f"bench_peers: skipping {name}: {reason}", flush=True)
    cases = inputs()
    models = {k: v[0] for k, v in cases.items()}
    seconds = 0.3 if quick else 3.0
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        kit = BenchKit(root / "kit")
        for name, path in models.items():
            kit.build(name, path)
        daemon = kit.daemon(root / "daemon")
        daemon.start(timeout=120)
        bare = BareServer(models)
        peer = MlServer(root / "mlserver", models) if why[MLSERVER.name] is None else None
        try:
            urls = {"wasmgate": daemon.url, CEILING: bare.url}
            if peer is not None:
                peer.wait_ready(list(cases))
                urls["MLServer 1.7"] = peer.url
            figures = versus(urls, cases, seconds)
            figures.append(raw_adapter(daemon, bare, cases["digits"][1], seconds))
            figures += binary_vs_json(daemon, cases["mobilenet"][1], seconds, 1 if quick else 3)
            if why[PERF_ANALYZER.name] is None:
                figures += with_perf_analyzer(daemon, cases["digits"][1], quick, root)
        finally:
            daemon.stop()
            bare.stop()
            if peer is not None:
                peer.stop()
    return figures


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()

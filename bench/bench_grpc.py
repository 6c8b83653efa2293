"""KServe V2 over gRPC against HTTP binary tensors: same daemon, same model, same client.

``python -m bench.bench_grpc [--quick] [--json OUT]``

A real ``wasmgate serve`` with ``grpc.port`` serves the digits model (FP32 [1, 64] ->
[1, 10], batches of one). Triton's ``perf_analyzer`` (`bench.peers`: tritonclient 2.50's
binary) drives it with ``-i grpc`` and, in the same run, ``-i http`` (binary tensors, its
HTTP default): p50 at 1 client and req/s at 1 and 8 clients. The baseline of
each gRPC figure is the HTTP binary figure of the same cell. The windows count as stable
within `STABILITY` percent: on a shared machine a tighter check fails runs that measured
fine (perf_analyzer's request-count mode reports no usable req/s). In ``--quick`` a
perf_analyzer whose venv is not cached yet is skipped with the reason printed (installing
takes minutes).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.bench_ladder import inputs
from bench.common import Figure, script_main
from bench.peers import PERF_ANALYZER, missing_system_libs, perf_analyzer
from tests.fixtures.benchkit import BenchKit
from tests.fixtures.net import free_port

SCENARIO = "digits perf_analyzer gRPC vs HTTP binary"
STABILITY = 1000


def skip_reason(quick: bool) -> str | None:
    """Why perf_analyzer cannot run here (None: it will)."""
    missing = missing_system_libs()
    if missing:
        return f"missing system library: {', '.join(missing)}"
    if quick and not PERF_ANALYZER.cached:
        return f"not installed in {PERF_ANALYZER.venv} yet (run the full suite once)"
    return None


def compare(http_url: str, grpc_url: str, requests: int, tmp: Path) -> list[Figure]:
    """One cell per concurrency, gRPC then HTTP binary, back to back."""
    figures: list[Figure] = []
    for clients in (1, 8):
        got = {
            protocol: perf_analyzer(url, "digits", requests, tmp / f"{protocol}-{clients}.csv",
                                    protocol=protocol, concurrency=clients, stability=STABILITY)
            for protocol, url in (("grpc", grpc_url), ("http", http_url))
        }  # fmt: skip
        grpc, http = got["grpc"], got["http"]
        if clients == 1:
            figures.append(Figure(SCENARIO, "p50, 1 client", grpc["p50"] * 1e6, "us",
                                  "HTTP binary", http["p50"] * 1e6))  # fmt: skip
        name = f"req/s, {clients} client" + ("s" if clients > 1 else "")
        figures.append(Figure(SCENARIO, name, grpc["req/s"], "/s", "HTTP binary", http["req/s"],
                              lower_is_better=False))  # fmt: skip
    return figures


def run(quick: bool) -> list[Figure]:
    reason = skip_reason(quick)
    if reason is not None:
        print(f"bench_grpc: skipping perf_analyzer: {reason}", flush=True)
        return []
    model = inputs()["digits"][0]
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        kit = BenchKit(root / "kit")
        kit.build("digits", model)
        port = free_port()
        daemon = kit.daemon(root / "daemon", config={"grpc": {"port": port}})
        daemon.start(timeout=120)
        try:
            http_url = daemon.url.split("//")[1]
            return compare(http_url, f"127.0.0.1:{port}", 50 if quick else 1000, root)
        finally:
            daemon.stop()


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()

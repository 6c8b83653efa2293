"""System shared memory against binary HTTP and in-process ``infer``: same model, same run.

``python -m bench.bench_shm [--quick] [--json OUT]``

A real ``wasmgate serve`` (``shared_memory.enabled``) serves the MobileNet-class CNN
(FP32 [1, 3, 128, 128], 192 KiB per request; batching off). A local client puts the image
in a POSIX shared memory region registered once, and each request is a small JSON body
naming it (``shared_memory_region``), its output asked into a second region: what a camera
process on the gateway does instead of sending the tensor through the socket. ``wrk``
(`bench.wrk`) sends that body, and in the same rounds the same tensor as a binary-extension
body (``bench_http.v2_body``): p50 at 1 connection, req/s and the daemon's CPU time per
request (``/proc``) at 8, rounds alternating, medians. The in-process baseline is the
daemon's own ONNX Runtime backend's ``infer`` on the same file in this process
(loaded once, measured in each round too, as `bench_ladder.backend_limit` does).
Goals (issue 43): p50 at 1 client within 1.15x of in-process; req/s at 8 clients at least
1.3x binary HTTP.

Triton's ``perf_analyzer`` (`bench.peers`) then drives the daemon with ``--shared-memory
system`` and, back to back, without (binary tensors), over HTTP and over gRPC: p50 at 1
client. Skipped with the reason printed when it is not installed (``--quick``) or a system
library is missing.

The machine running the suite may be shared: only same-run ratios mean anything.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from bench import bench_http, wrk
from bench.bench_grpc import skip_reason
from bench.bench_ladder import inputs
from bench.common import Figure, cpu_seconds, median, script_main
from bench.peers import perf_analyzer
from tests.fixtures.benchkit import BenchKit, daemon_pid
from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from wasmgate.device_profiles import detect
from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend

SCENARIO = "mobilenet system shared memory"
OUT_BYTES = 64 * 1024


def _post(url: str, doc: dict[str, Any]) -> None:
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def shm_body(daemon: Daemon, x: np.ndarray[Any, Any], names: tuple[str, str]) -> bytes:
    """Register the two regions (input holding ``x``, output) and return the request body."""
    output = daemon.get_json("/v2/models/mobilenet")["outputs"][0]["name"]
    base = f"{daemon.url}/v2/systemsharedmemory/region"
    _post(f"{base}/in/register", {"key": f"/{names[0]}", "offset": 0, "byte_size": x.nbytes})
    _post(f"{base}/out/register", {"key": f"/{names[1]}", "offset": 0, "byte_size": OUT_BYTES})
    doc = {
        "inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape), "parameters": {
            "shared_memory_region": "in", "shared_memory_byte_size": x.nbytes}}],
        "outputs": [{"name": output, "parameters": {
            "shared_memory_region": "out", "shared_memory_byte_size": OUT_BYTES}}],
    }  # fmt: skip
    return json.dumps(doc).encode()


def over_http(daemon: Daemon, x: np.ndarray[Any, Any], seconds: float, rounds: int) -> list[Figure]:
    """wrk: shared memory and binary HTTP alternating; p50 at 1 connection, req/s and the
    daemon's CPU per request at 8."""
    made = [shared_memory.SharedMemory(create=True, size=size) for size in (x.nbytes, OUT_BYTES)]
    try:
        np.ndarray(x.shape, np.float32, made[0].buf)[:] = x
        bodies = {"shm": (shm_body(daemon, x, (made[0].name, made[1].name)), {}),
                  "binary": bench_http.v2_body(x, "input")}  # fmt: skip
        got = measure(daemon, bodies, x, seconds, rounds)
        _post(f"{daemon.url}/v2/systemsharedmemory/unregister", {})
    finally:
        for region in made:
            region.close()
            region.unlink()
    raw = got["raw p50"] * 1e3
    return [
        Figure(SCENARIO, "p50, 1 client (goal <= 1.15x)", got["shm p50"] * 1e3, "ms",
               "in-process infer", raw),
        Figure(SCENARIO, "binary HTTP p50, 1 client", got["binary p50"] * 1e3, "ms",
               "in-process infer", raw),
        Figure(SCENARIO, "req/s, 8 clients (goal >= 1.3x)", got["shm rps"], "/s",
               "binary HTTP", got["binary rps"], lower_is_better=False),
        Figure(SCENARIO, "daemon CPU per request, 8 clients", got["shm cpu"] * 1e3, "ms",
               "binary HTTP", got["binary cpu"] * 1e3),
    ]  # fmt: skip


def measure(
    daemon: Daemon,
    bodies: dict[str, tuple[bytes, dict[str, str]]],
    x: np.ndarray[Any, Any],
    seconds: float,
    rounds: int,
) -> dict[str, float]:
    """Medians over ``rounds`` interleaved rounds (a loaded machine's swings hit all alike)."""
    url, pid = f"{daemon.url}/v2/models/mobilenet/infer", daemon_pid(daemon)
    for body, headers in bodies.values():  # warm up both paths (first runs, page faults)
        wrk.run(url, body, headers, 8, 1.0)
    samples: dict[str, list[float]] = defaultdict(list)
    with in_process(get_path(), x) as in_process_p50:
        for round_ in range(rounds):
            samples["raw p50"].append(in_process_p50(seconds))
            # Each round swaps which goes first: no path always follows the in-process run.
            order = list(bodies.items())[:: 1 if round_ % 2 == 0 else -1]
            for kind, (body, headers) in order:
                samples[f"{kind} p50"].append(wrk.run(url, body, headers, 1, seconds).p50)
            for kind, (body, headers) in order:
                before = cpu_seconds(pid)
                loaded = wrk.run(url, body, headers, 8, seconds)
                samples[f"{kind} rps"].append(loaded.rps)
                samples[f"{kind} cpu"].append((cpu_seconds(pid) - before) / loaded.requests)
    return {name: median(values) for name, values in samples.items()}


@contextlib.contextmanager
def in_process(path: Path, x: np.ndarray[Any, Any]) -> Iterator[Callable[[float], float]]:
    """The daemon's ONNX Runtime backend on ``path`` in this process, loaded once (its
    device profile, threads and session options): ``p50(seconds)`` is the median latency of
    ``infer([x])`` in a closed loop of ``seconds``."""
    model = create_backend("onnx").load(path.read_bytes(), ModelSpec(path.stem),
                                        LoadOptions(detect().profile))  # fmt: skip

    def p50(seconds: float) -> float:
        latencies, stop = [], time.perf_counter() + seconds
        while (start := time.perf_counter()) < stop:
            model.infer([x])
            latencies.append(time.perf_counter() - start)
        return median(latencies)

    try:
        p50(0.5)  # warm-up
        yield p50
    finally:
        model.close()


def get_path() -> Path:
    return inputs()["mobilenet"][0]


def with_perf_analyzer(daemon: Daemon, requests: int, tmp: Path, quick: bool) -> list[Figure]:
    """perf_analyzer over HTTP and gRPC, with and without ``--shared-memory system``."""
    urls = {"http": daemon.url.split("//")[1], "grpc": f"127.0.0.1:{grpc_port(daemon)}"}
    stability = 1000 if quick else 50
    shm_args = ("--shared-memory", "system", "--output-shared-memory-size", str(OUT_BYTES))
    figures = []
    for protocol, url in urls.items():
        got = {
            kind: perf_analyzer(url, "mobilenet", requests, tmp / f"pa-{protocol}-{kind}.csv",
                                protocol=protocol, stability=stability, extra=extra)
            for kind, extra in (("shm", shm_args), ("plain", ()))
        }  # fmt: skip
        figures.append(Figure(SCENARIO, f"perf_analyzer -i {protocol} --shared-memory p50",
                              got["shm"]["p50"] * 1e3, "ms", f"perf_analyzer binary {protocol}",
                              got["plain"]["p50"] * 1e3))  # fmt: skip
    return figures


def grpc_port(daemon: Daemon) -> int:
    return int(daemon.get_json("/v1/status")["components"]["grpc"]["port"])


def run(quick: bool) -> list[Figure]:
    seconds, rounds = (1.0, 1) if quick else (3.0, 5)
    path, x = inputs()["mobilenet"]
    why = skip_reason(quick)
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        kit = BenchKit(root / "kit")
        kit.build("mobilenet", path)
        config = {"shared_memory": {"enabled": True}, "grpc": {"port": free_port()}}
        daemon = kit.daemon(root / "daemon", config=config)
        daemon.start(timeout=120)
        try:
            figures = over_http(daemon, x, seconds, rounds)
            if why is None:
                figures += with_perf_analyzer(daemon, 20 if quick else 200, root, quick)
            else:
                print(f"bench_shm: skipping perf_analyzer: {why}", flush=True)
        finally:
            daemon.stop()
    return figures


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()

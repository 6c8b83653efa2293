"""Dynamic batching on vs off: throughput at concurrency 1, 2, 8 and 32.

``python -m bench.bench_batching [--seconds S] [--rounds R] [--json OUT]``

Closed-loop clients (threads) send batch-1 requests for S seconds. "off": every client calls
the loaded model directly (ORT runs concurrent calls itself); "on": every client goes through
one `Batcher` (default max_batch_size 32, max_queue_delay 2 ms, one worker; a fresh one per
cell, so each cell starts from no measurement and shows what the batcher learns). Rounds
alternate off/on; the table shows the median throughput of R rounds and the on/off ratio
(higher is better), plus the median request latency. The throughput label says how the
batcher ran the cell: mean batch rows, the share of requests that ran on the caller's thread
(idle worker, or batching measured not to pay) and the batch limit it ended with. Models:
the MobileNet-class CNN from the shared model fixtures (dynamic batch) and a 3x1024 MLP
built here (GEMM-bound: where batching pays on a CPU).

What to expect on a CPU: a convolutional net is compute-bound at batch 1 (MLAS NCHWc kernels
already fill the cores), so its per-image cost does not fall with batch size; the batcher
measures that and lets callers run side by side as unbatched ones do (ratio ≈ 1). The gain
shows on GEMM-bound models (weights re-used across rows) and on accelerators (GPU/NPU), where
per-call overhead dominates.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench.common import Figure, format_table, percentile, write_json
from tests.fixtures.models import get_models
from wasmgate.device_profiles import detect
from wasmgate.runtime.backends import LoadedModel, LoadOptions, ModelSpec, create_backend
from wasmgate.runtime.serving.batcher import Batcher, BatcherStats

Array = npt.NDArray[Any]
Infer = Callable[[Sequence[Array]], list[Array]]
CONCURRENCY = (1, 2, 8, 32)


def mlp1024() -> bytes:
    rng = np.random.default_rng(5)
    nodes, inits, cur = [], [], "x"
    for i in range(3):
        w = rng.normal(0, 1 / 32, (1024, 1024)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(w[0], f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        cur = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp1024",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, ["N", 1024])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def closed_loop(infer: Infer, x: Array, clients: int, seconds: float) -> tuple[float, float, float]:
    """(requests per second, median and p95 latency in ms) of ``clients`` closed-loop threads."""
    stop = time.perf_counter() + seconds
    latencies: list[list[float]] = [[] for _ in range(clients)]

    def client(out: list[float]) -> None:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            infer([x])
            out.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(lat,)) for lat in latencies]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    flat = [v for lat in latencies for v in lat]
    return len(flat) / elapsed, statistics.median(flat) * 1e3, percentile(flat, 95) * 1e3


def bench_model(name: str, model: LoadedModel, x: Array, args: argparse.Namespace) -> list[Figure]:
    figures = []
    for clients in CONCURRENCY:
        off: list[tuple[float, float, float]] = []
        on: list[tuple[float, float, float]] = []
        batcher = Batcher(
            model, args.max_batch, args.delay_us, queue_size=256, workers=args.workers
        )
        try:
            closed_loop(model.infer, x, clients, 0.3)  # warm-up both paths
            closed_loop(batcher.infer, x, clients, 0.3)
            for _ in range(args.rounds):
                off.append(closed_loop(model.infer, x, clients, args.seconds))
                on.append(closed_loop(batcher.infer, x, clients, args.seconds))
            stats = batcher.stats()
        finally:
            batcher.close()
        tput_off, lat_off, p95_off = (statistics.median(col) for col in zip(*off, strict=True))
        tput_on, lat_on, p95_on = (statistics.median(col) for col in zip(*on, strict=True))
        scenario = f"{name} c={clients}"
        figures += [
            Figure(scenario, f"batched req/s ({_how(stats)})", tput_on, "/s",
                   "unbatched", tput_off, lower_is_better=False),
            Figure(scenario, "batched median latency", lat_on, "ms", "unbatched", lat_off),
            Figure(scenario, "batched p95 latency", p95_on, "ms", "unbatched", p95_off),
        ]  # fmt: skip
    return figures


def _how(stats: BatcherStats) -> str:
    inline = stats.inline / stats.requests if stats.requests else 0.0
    return f"batch {stats.mean_batch_rows:.1f}, {inline:.0%} inline, limit {stats.limit}"


def run(quick: bool) -> list[Figure]:
    """The suite's entry: 2 s cells, 2 rounds (``quick``: 0.1 s, 1 round)."""
    argv = ["--seconds", "0.1", "--rounds", "1"] if quick else ["--seconds", "2", "--rounds", "2"]
    return measure(parser().parse_args(argv))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per cell")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--max-batch", type=int, default=32, help="Batcher max_batch_size")
    parser.add_argument("--delay-us", type=int, default=2000, help="Batcher max_queue_delay_us")
    parser.add_argument("--workers", type=int, default=1, help="concurrent batches")
    return parser


def measure(args: argparse.Namespace) -> list[Figure]:
    """Both models at every concurrency, batching on and off."""
    profile = detect().profile
    backend = create_backend("onnx")
    options = LoadOptions(profile)
    models = get_models()
    mobilenet = backend.load(models.mobilenet_fp32.read_bytes(), ModelSpec("mobilenet"), options)
    mlp = backend.load(mlp1024(), ModelSpec("mlp1024"), options)
    rng = np.random.default_rng(0)
    cases = [
        ("mobilenet", mobilenet, rng.normal(size=(1, 3, 128, 128)).astype(np.float32)),
        ("mlp1024", mlp, rng.normal(size=(1, 1024)).astype(np.float32)),
    ]
    return [f for name, m, x in cases for f in bench_model(name, m, x, args)]


def main() -> None:
    args = parser().parse_args()
    profile = detect().profile
    figures = measure(args)
    print(f"profile {profile.name}, ORT {ort.__version__}, {os.cpu_count()} CPUs")
    print("ratio = batched / unbatched (req/s: higher is better; latency: lower is better)")
    print(format_table(figures))
    if args.json:
        write_json(figures, args.json, {"profile": profile.name, "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()

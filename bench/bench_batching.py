"""Dynamic batching on vs off: throughput at concurrency 1, 2, 8 and 32.

``python -m bench.bench_batching [--seconds S] [--rounds R] [--only MODEL] [--json OUT]``

Closed-loop clients send batch-1 requests for S seconds, two ways. ``threads``: client
threads blocking on the call; "off" calls the loaded model directly (ORT runs concurrent
calls itself), "on" one `Batcher`'s blocking ``infer`` (``--workers`` batches at once, a
private dispatcher). ``service``: what the daemon does. Clients are asyncio tasks on one
event loop awaiting `execute_model`, the call `InferenceService.infer_model` makes once a
request is admitted (the admission gate and input validation, alike on both sides, are
left out). "on": the handle is a `Batcher` (one worker, as the loader makes it) on one
`BatchDispatcher` of a thread per CPU shared by the run (the daemon's ``batch_workers``
default), awaited as `execute_model` awaits it (`Batcher.submit_async`). "off": the loaded model,
run as the service runs an unbatched one: on a `FairPool` of 2 x CPU workers (the daemon's
``workers`` default), or inline on the loop when its `InlinePolicy` says the model is tiny.

Every cell gets a fresh batcher (it starts from no measurement and shows what the batcher
learns). Rounds alternate the cells; the table shows medians of R rounds and the on/off
ratio, plus median and p95 latency. The throughput label says how the batcher ran the cell:
mean batch rows, the share of requests run on the caller's thread and the batch limit it
ended with. At the highest concurrency the same rounds time the ceiling: one thread calling
the model at batch ``--max-batch`` (rows/s, against batch 1), and "service batched vs ORT
ceiling" says how much of it batching reaches; "submit_async" is the clients awaiting
`Batcher.submit_async` under ``wait_for`` alone: what ``execute_model`` itself does for a
batched model, without its bookkeeping (timings, failure translation, the hold).
Models: the MobileNet-class CNN of the shared model fixtures and a 3x1024 MLP built here
(GEMM-bound: where batching pays on CPU).

A convolutional net on a CPU is compute-bound at batch 1 (MLAS NCHWc kernels already fill
the cores), so its per-image cost does not fall with the batch; the batcher measures that
and lets callers run side by side as unbatched ones do (ratio ≈ 1). The gain shows on
GEMM-bound models (weights re-used across rows) and on accelerators, where per-call
overhead dominates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
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
from wasmgate.runtime.batching.batcher import Batcher, BatcherStats
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.served.loaded import ServedModel
from wasmgate.runtime.serving.execute import execute_model
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.runtime.serving.scheduler import FairPool

Array = npt.NDArray[Any]
Infer = Callable[[Sequence[Array]], list[Array]]
Measured = tuple[float, float, float]
"""Requests (or rows) per second, median and p95 latency in ms."""
CONCURRENCY = (1, 2, 8, 32)
DEADLINE_S = 30.0  # far off: no request of a healthy run nears it


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


def closed_loop(infer: Infer, x: Array, clients: int, seconds: float) -> Measured:
    """Throughput and latency of ``clients`` closed-loop threads calling ``infer``."""
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
    return _measured([v for lat in latencies for v in lat], time.perf_counter() - start)


def async_closed_loop(
    call: Callable[[], Awaitable[object]], clients: int, seconds: float
) -> Measured:
    """Throughput and latency of ``clients`` closed-loop tasks on one new event loop."""
    latencies: list[float] = []

    async def client(stop: float) -> None:
        while (t0 := time.perf_counter()) < stop:
            await call()
            latencies.append(time.perf_counter() - t0)

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(client(start + seconds) for _ in range(clients)))
        return time.perf_counter() - start

    return _measured(latencies, asyncio.run(main()))


def ceiling(model: LoadedModel, x: Array, rows: int, seconds: float) -> Measured:
    """Rows per second of one thread calling the model at batch ``rows``."""
    tput, p50, p95 = closed_loop(model.infer, np.repeat(x, rows, axis=0), 1, seconds)
    return tput * rows, p50, p95


def _measured(lat: list[float], elapsed: float) -> Measured:
    return len(lat) / elapsed, statistics.median(lat) * 1e3, percentile(lat, 95) * 1e3


def service_call(
    pool: FairPool, served: ServedModel, x: Array, policy: InlinePolicy
) -> Callable[[], Awaitable[object]]:
    """One request as `InferenceService.infer_model` runs it once admitted."""
    tenant = pool.for_tenant(f"model:{served.name}", 1.0)

    async def call() -> object:
        return await execute_model(
            tenant, served, [x], time.monotonic() + DEADLINE_S, {}, hold=_no_hold,
            policy=policy, pool_busy=pool.has_queued(),
        )  # fmt: skip

    return call


def async_call(b: Batcher, x: Array) -> Callable[[], Awaitable[object]]:
    """A request awaited through `Batcher.submit_async` alone (``execute_model``'s path)."""

    async def call() -> object:
        deadline = time.monotonic() + DEADLINE_S
        async with asyncio.timeout(DEADLINE_S):
            return await b.submit_async([x], deadline=deadline)[0]

    return call


def _no_hold(work: asyncio.Future[Any]) -> None:
    del work  # no admission gate here (the deadline is never reached anyway)


Cell = Callable[[float], Measured]


@dataclass(frozen=True)
class Parts:
    """The daemon's shared parts: its worker pool and its batch dispatcher."""

    pool: FairPool
    dispatcher: BatchDispatcher


def alternate(
    cells: dict[str, Cell], rounds: int, seconds: float, warmup: float
) -> dict[str, Measured]:
    """Every cell warmed up once, then ``rounds`` rounds of all cells in turn: medians."""
    for cell in cells.values():
        cell(warmup)
    runs: dict[str, list[Measured]] = {name: [] for name in cells}
    for _ in range(rounds):
        for name, cell in cells.items():
            runs[name].append(cell(seconds))
    medians = {name: [statistics.median(col) for col in zip(*got, strict=True)]
               for name, got in runs.items()}  # fmt: skip
    return {name: (m[0], m[1], m[2]) for name, m in medians.items()}


def bench_model(
    name: str, model: LoadedModel, x: Array, args: argparse.Namespace, parts: Parts
) -> list[Figure]:
    figures = []
    for clients in CONCURRENCY:
        private = Batcher(model, args.max_batch, args.delay_us, 256, workers=args.workers)
        shared = Batcher(model, args.max_batch, args.delay_us, 256, dispatcher=parts.dispatcher)
        policy = InlinePolicy()  # the service's one, shared by its unbatched models
        on = service_call(parts.pool, ServedModel(name, shared, batched=True), x, policy)
        off = service_call(parts.pool, ServedModel(name, model), x, policy)
        cells: dict[str, Cell] = {
            "threads off": partial(closed_loop, model.infer, x, clients),
            "threads on": partial(closed_loop, private.infer, x, clients),
            "service off": partial(async_closed_loop, off, clients),
            "service on": partial(async_closed_loop, on, clients),
        }
        native = Batcher(model, args.max_batch, args.delay_us, 256, dispatcher=parts.dispatcher)
        if clients == CONCURRENCY[-1]:  # the ceiling and submit_async, in the same rounds
            cells["batch 1"] = partial(ceiling, model, x, 1)
            cells["ceiling"] = partial(ceiling, model, x, args.max_batch)
            cells["async"] = partial(async_closed_loop, async_call(native, x), clients)
        try:
            got = alternate(cells, args.rounds, args.seconds, args.warmup)
        finally:
            for b in (private, shared, native):
                b.close()
        scenario = f"{name} c={clients}"
        figures += _figures(scenario, "", got["threads on"], got["threads off"], private)
        figures += _figures(scenario, "service ", got["service on"], got["service off"], shared)
        if "ceiling" in got:
            figures += _ceiling_figures(name, args.max_batch, got, native)
    return figures


def _figures(scenario: str, how: str, on: Measured, off: Measured, b: Batcher) -> list[Figure]:
    base = f"{how}unbatched"
    return [
        Figure(scenario, f"{how}batched req/s ({_how(b.stats())})", on[0], "/s", base,
               off[0], lower_is_better=False),
        Figure(scenario, f"{how}batched median latency", on[1], "ms", base, off[1]),
        Figure(scenario, f"{how}batched p95 latency", on[2], "ms", base, off[2]),
    ]  # fmt: skip


def _ceiling_figures(
    name: str, rows: int, got: dict[str, Measured], native: Batcher
) -> list[Figure]:
    top, one, off = got["ceiling"][0], got["batch 1"][0], got["service off"][0]
    scenario = f"{name} c={CONCURRENCY[-1]}"
    return [
        Figure(f"{name} ORT", f"rows/s at batch {rows}, one thread", top, "/s", "batch 1",
               one, lower_is_better=False),
        Figure(scenario, "service batched vs ORT ceiling", got["service on"][0], "/s",
               f"batch {rows}", top, lower_is_better=False),
        Figure(scenario, f"submit_async req/s ({_how(native.stats())})", got["async"][0],
               "/s", "service unbatched", off, lower_is_better=False),
    ]  # fmt: skip


def _how(stats: BatcherStats) -> str:
    inline = stats.inline / stats.requests if stats.requests else 0.0
    return f"batch {stats.mean_batch_rows:.1f}, {inline:.0%} inline, limit {stats.limit}"


def run(quick: bool) -> list[Figure]:
    """The suite's entry: 2 s cells, 2 rounds (``quick``: 0.1 s, 1 round, 0.05 s warm-up)."""
    argv = ["--seconds", "2", "--rounds", "2"]
    if quick:
        argv = ["--seconds", "0.1", "--rounds", "1", "--warmup", "0.05"]
    return measure(parser().parse_args(argv))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per cell")
    parser.add_argument("--warmup", type=float, default=0.3, help="seconds of warm-up per cell")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--max-batch", type=int, default=32, help="Batcher max_batch_size")
    parser.add_argument("--delay-us", type=int, default=2000, help="Batcher max_queue_delay_us")
    parser.add_argument("--workers", type=int, default=1, help="threads cells: concurrent batches")
    parser.add_argument("--only", choices=("mobilenet", "mlp1024"), help="one model only")
    return parser


def _mobilenet() -> bytes:
    return get_models().mobilenet_fp32.read_bytes()  # (built on first use: --only skips it)


def measure(args: argparse.Namespace) -> list[Figure]:
    """Both models at every concurrency, batching on and off, threads and service."""
    backend = create_backend("onnx")
    options = LoadOptions(detect().profile)
    rng = np.random.default_rng(0)
    cases: list[tuple[str, Callable[[], bytes], Array]] = [
        ("mobilenet", _mobilenet, rng.normal(size=(1, 3, 128, 128)).astype(np.float32)),
        ("mlp1024", mlp1024, rng.normal(size=(1, 1024)).astype(np.float32)),
    ]
    figures: list[Figure] = []
    cpus = os.cpu_count() or 1
    with BatchDispatcher(cpus) as dispatcher, FairPool(2 * cpus) as pool:
        for name, data, x in cases:
            if args.only in (None, name):
                model = backend.load(data(), ModelSpec(name), options)
                figures += bench_model(name, model, x, args, Parts(pool, dispatcher))
    return figures


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

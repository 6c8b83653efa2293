"""HTTP KServe V2 throughput and latency at concurrency 1, 8 and 32, against raw ONNX Runtime.

``python -m bench.bench_http [--seconds S] [--url HOST:PORT] [--model NAME] [--adapter NAME]
[--payload FILE] [--model-file ONNX] [--json OUT]``

Without ``--url`` the bench starts the HTTP app (errors, V2, adapters, metrics, status) in a
child process on a free loopback port, serving the digits model (FP32 [-1, 64] -> [-1, 10])
from the shared model fixtures through a minimal in-bench `ServiceAPI`, plus an ``echo``
adapter (Python, no sandbox: it isolates the HTTP cost). With ``--url`` it drives a running
daemon instead. ``wrk`` (`bench.wrk`; connections = concurrency, closed loop) sends batch-1
binary V2 requests (``POST /v2/models/{m}/infer``) and raw adapter requests for S seconds
per cell. `http_run` (a Python client) stays for scenarios that need per-request control.

The limit, measured in the same run: ``session.run`` on the same ONNX file in this process,
closed-loop from the same number of threads. Ratios: HTTP / ORT (req/s: higher is better,
ideal 1.0; latency: lower is better, ideal 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from bench import wrk
from bench.common import Figure, format_table, median, percentile, write_json
from tests.fixtures.net import free_port, wait_for_port

Array = npt.NDArray[Any]
CONCURRENCY = (1, 8, 32)


def ort_limit(model: Path, x: Array, concurrency: int, seconds: float) -> list[float]:
    """Per-call latencies of ``session.run`` from ``concurrency`` closed-loop threads."""
    options = ort.SessionOptions()
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for _ in range(20):
        session.run(None, {name: x})
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker() -> None:
        mine: list[float] = []
        while (start := time.perf_counter()) < stop:
            session.run(None, {name: x})
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def v2_body(x: Array, input_name: str) -> tuple[bytes, dict[str, str]]:
    raw = x.astype("<f4").tobytes()
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": input_name,
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head))}


OVERLOAD = (429, 503)
"""Admission control's answers: counted as rejected, not latency samples, not failures."""


@dataclass
class Samples:
    latencies: list[float] = field(default_factory=list)
    rejected: int = 0


async def _client(
    url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float
) -> Samples:
    samples = Samples()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> bool:
            async with session.post(url, data=body, headers=headers) as response:
                text = await response.read()
                if response.status in OVERLOAD:
                    return False
                if response.status != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status} {text[:200]!r}")
                return True

        for _ in range(10):
            await one()
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            while (start := time.perf_counter()) < stop:
                if await one():
                    samples.latencies.append(time.perf_counter() - start)
                else:
                    samples.rejected += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples


def http_run(
    url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float
) -> Samples:
    return asyncio.run(_client(url, body, headers, concurrency, seconds))


def figures_for(
    scenario: str, http: wrk.WrkResult, limit: list[float], seconds: float, base: str
) -> list[Figure]:
    return [
        Figure(scenario, "req/s", http.rps, "/s", base, len(limit) / seconds,
               lower_is_better=False),
        Figure(scenario, "p50", http.p50 * 1e3, "ms", base, median(limit) * 1e3),
        Figure(scenario, "p99", http.p99 * 1e3, "ms", base, percentile(limit, 99) * 1e3),
    ]  # fmt: skip


def start_server(model: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "bench.http_server", str(model), str(port)]
    proc = subprocess.Popen(command, cwd=Path(__file__).resolve().parent.parent)
    try:
        wait_for_port(port, timeout=30)
    except TimeoutError:
        proc.kill()
        raise
    return proc, f"127.0.0.1:{port}"


def measure(args: argparse.Namespace, model: Path, url: str) -> list[Figure]:
    x = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
    body, headers = v2_body(x, args.input)
    infer_url = f"http://{url}/v2/models/{args.model}/infer"
    raw_url = f"http://{url}/v1/adapters/{args.adapter}"
    payload = args.payload.read_bytes() if args.payload else x.tobytes()
    figures: list[Figure] = []
    for c in CONCURRENCY:
        limit = ort_limit(model, x, c, args.seconds)
        base = f"ORT c{c}"
        v2 = wrk.run(infer_url, body, headers, c, args.seconds)
        figures += figures_for(f"v2 c{c}", v2, limit, args.seconds, base)
        raw = wrk.run(raw_url, payload, {}, c, args.seconds)
        figures += figures_for(f"raw c{c}", raw, limit, args.seconds, base)
    return figures


def run(quick: bool) -> list[Figure]:
    """The suite's entry: the in-bench server (HTTP layer only), 3 s cells (quick: 1 s)."""
    from tests.fixtures.models import get_models  # noqa: PLC0415 - builds fixtures once

    args = parser().parse_args(["--seconds", "1" if quick else "3"])
    model = get_models().digits_fp32
    proc, url = start_server(model)
    try:
        return measure(args, model, url)
    finally:
        proc.terminate()
        proc.wait(10)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--url", help="HOST:PORT of a running daemon (default: start one)")
    parser.add_argument("--model", default="digits", help="V2 model name to drive")
    parser.add_argument("--input", default="input", help="its input tensor name")
    parser.add_argument("--adapter", default="echo", help="adapter for the raw endpoint")
    parser.add_argument("--payload", type=Path, help="raw adapter payload file (default: x)")
    parser.add_argument("--model-file", type=Path, help="ONNX file for the ORT limit")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    return parser


def main() -> None:
    args = parser().parse_args()
    if args.model_file is None:
        from tests.fixtures.models import get_models  # noqa: PLC0415 - builds fixtures once

        args.model_file = get_models().digits_fp32
    proc, url = (None, args.url) if args.url else start_server(args.model_file)
    try:
        figures = measure(args, args.model_file, url)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    print(f"ORT {ort.__version__}, {os.cpu_count()} CPUs, {args.seconds:g} s per cell, {url}")
    print("ratio = HTTP / ORT session.run at the same concurrency")
    print("(req/s: higher is better, ideal 1.0; latency: lower is better, ideal 1.0)")
    print(format_table(figures))
    if args.json:
        write_json(figures, args.json, {"cpus": os.cpu_count(), "url": url})


if __name__ == "__main__":
    main()

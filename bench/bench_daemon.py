"""A real daemon's life: cold start, restart, hot swap under load, idle and loaded RSS.

``python -m bench.bench_daemon [--quick] [--json OUT]``

- cold start: ``wasmgate serve`` spawned until ``/v2/health/ready`` answers 200, with the
  digits and MobileNet-class bundles (verify, compile the adapter, load both models,
  self-test) against the same daemon with an empty bundle directory (imports, listeners);
- restart: the same data directory again (compiled adapter and optimized models cached);
- hot swap: ``PUT /v1/bundles`` of digits v2 while 4 clients stream sandboxed requests:
  time until the PUT answers (v2 serving), failed requests during the swap (must be 0), and
  the stream's p99 during the swap against its p99 before;
- RSS (VmRSS) idle after start, and after a loaded phase (8 clients on MobileNet), against
  the empty daemon's RSS.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import numpy as np

from bench import bench_http
from bench.common import Figure, median, percentile, script_main
from tests.fixtures.benchkit import BenchKit, daemon_pid, payload, rss_mb
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models

TOKEN = "bench-token"  # noqa: S105 - a throwaway daemon on loopback


def timed_start(daemon: Daemon) -> float:
    start = time.perf_counter()
    daemon.start(timeout=180)
    return time.perf_counter() - start


async def _stream(url: str, body: bytes, stop: asyncio.Event) -> tuple[list[float], int]:
    """4 closed-loop clients until ``stop``; (latencies, failed requests)."""
    latencies: list[float] = []
    failed = 0
    async with aiohttp.ClientSession() as session:

        async def client() -> None:
            nonlocal failed
            while not stop.is_set():
                start = time.perf_counter()
                async with session.post(url, data=body) as r:
                    await r.read()
                    failed += r.status != 200
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(client() for _ in range(4)))
    return latencies, failed


async def _swap(daemon: Daemon, bundle: Path, body: bytes, before_s: float) -> list[float]:
    """[p99 before, p99 during, PUT seconds, failures, requests] while streaming."""
    stop = asyncio.Event()
    url = f"{daemon.url}/v1/adapters/digits"
    stream = asyncio.create_task(_stream(url, body, stop))
    await asyncio.sleep(before_s)
    stop.set()
    before, failed_before = await stream
    stop = asyncio.Event()
    stream = asyncio.create_task(_stream(url, body, stop))
    await asyncio.sleep(0.2)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        async with session.put(f"{daemon.url}/v1/bundles", data=bundle.read_bytes(),
                               headers=headers) as r:  # fmt: skip
            text = await r.text()
            if r.status != 201:
                raise RuntimeError(f"hot swap refused: {r.status} {text}")
        put_s = time.perf_counter() - start
    await asyncio.sleep(0.2)
    stop.set()
    during, failed = await stream
    return [percentile(before, 99), percentile(during, 99), put_s, failed + failed_before,
            len(during)]  # fmt: skip


def _served_version(daemon: Daemon, body: bytes) -> str:
    req = urllib.request.Request(f"{daemon.url}/v1/adapters/digits", data=body)
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(r.headers.get("X-Wasmgate-Version", "?"))


def run(quick: bool) -> list[Figure]:
    """Start, restart, swap and measure; ``quick`` uses one start each and short loads."""
    m = get_models()
    x = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
    big = np.random.default_rng(1).standard_normal((1, 3, 128, 128)).astype(np.float32)
    starts = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        empty = BenchKit(root / "empty")
        kit = BenchKit(root / "kit")
        kit.build("digits", m.digits_fp32)
        kit.build("mobilenet", m.mobilenet_fp32)
        v2 = kit.build("digits", m.digits_fp32, 2, out_dir=root)
        bare_s, cold_s, warm_s = [], [], []
        for i in range(starts):
            bare = empty.daemon(root / f"bare{i}")
            bare_s.append(timed_start(bare))
            bare_rss = rss_mb(daemon_pid(bare))
            bare.stop()
            daemon = kit.daemon(root / f"d{i}", config={"http": {"management_token": TOKEN}})
            cold_s.append(timed_start(daemon))
            daemon.stop()
            warm_s.append(timed_start(daemon))
            if i < starts - 1:
                daemon.stop()
        try:
            idle = rss_mb(daemon_pid(daemon))
            seconds = 0.5 if quick else 5.0
            url = f"{daemon.url}/v1/adapters/mobilenet"
            bench_http.http_run(url, payload(big), {}, 8, seconds)
            loaded = rss_mb(daemon_pid(daemon))
            p99_before, p99_during, put_s, failed, total = asyncio.run(
                _swap(daemon, v2, payload(x), 0.5 if quick else 3.0)
            )
            if _served_version(daemon, payload(x)) != "2":
                raise RuntimeError("after the hot swap digits v2 is not serving")
        finally:
            daemon.stop()
    cold, bare_med = median(cold_s), median(bare_s)
    return [
        Figure("daemon", "cold start, 2 bundles (s)", cold, "s", "no bundles", bare_med),
        Figure("daemon", "restart, warm caches (s)", median(warm_s), "s", "cold start", cold),
        Figure("daemon", "idle RSS, 2 bundles", idle, "MB", "no bundles", bare_rss),
        Figure("daemon", "RSS after 8-client load", loaded, "MB", "idle", idle),
        Figure("hot swap", "PUT v2 -> serving", put_s * 1e3, "ms", "cold start",
               cold * 1e3),
        Figure("hot swap", "failed requests during swap", failed, "n", "requests sent", total),
        Figure("hot swap", "p99 during swap", p99_during * 1e3, "ms", "p99 before",
               p99_before * 1e3),
    ]  # fmt: skip


def main() -> None:
    script_main(__doc__, run, "one start, short loads")


if __name__ == "__main__":
    main()

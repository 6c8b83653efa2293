"""A real daemon's life: start to READY, hot swap under load, idle and loaded RSS.

``python -m bench.bench_daemon [--quick] [--json OUT]``

- the floor, measured in the same run: ``python -c "import numpy, onnxruntime, wasmtime,
  aiohttp"`` (seconds and VmRSS), what any daemon with these libraries pays before its own
  work; the start-up goals (READY in 0.5 s, idle 100 MB with 3 bundles) are read against it;
  and the same with an ONNX Runtime session of each of the 3 models held (ORT's first-session
  set-up and the weights: what serving them costs before any code of ours);
- start to READY: ``wasmgate serve`` spawned until it sends systemd's ``READY=1`` (a
  notification socket of our own), with no bundles and with 3 (digits, anomaly and the
  MobileNet class: verify, compile the adapter, load the models, self-test); cold = a fresh
  data directory, warm = a restart on it (compiled adapter and optimized models cached);
- hot swap: ``PUT /v1/bundles`` of digits v2 while 4 clients stream sandboxed requests:
  time until the PUT answers (v2 serving), failed requests during the swap (must be 0), and
  the stream's p99 during the swap against its p99 before;
- RSS (VmRSS) idle a second after READY, and after a loaded phase (8 clients on MobileNet).

Every process runs with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` cleared) and
one unmeasured start goes first: an installed wasmgate is byte-compiled by pip, so a real
start never compiles source, while a shell exporting ``PYTHONDONTWRITEBYTECODE=1`` over the
editable tree (no ``__pycache__``) charged each measured start ~0.1-0.2 s of compiling the
daemon's ~130 modules, a cost no gateway pays.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench import bench_http
from bench.common import Figure, median, percentile, script_main
from tests.fixtures.benchkit import BenchKit, daemon_pid, payload, rss_mb
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.notify_socket import NotifySocket

TOKEN = "bench-token"  # noqa: S105 - a throwaway daemon on loopback


FLOOR = "import numpy, onnxruntime, wasmtime, aiohttp"
_RSS = "print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"
GOAL_READY_S, GOAL_RSS_MB = 0.5, 100.0
BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}  # an empty value turns the variable off


class ReadyClock:
    """A notification socket of our own (`NotifySocket`): when did the daemon send
    ``READY=1``? Its thread stamps each datagram on arrival, so the HTTP poll of
    ``Daemon.start`` does not blur the figure; ``address`` goes into ``NOTIFY_SOCKET``.
    """

    def __init__(self, path: Path) -> None:
        self._socket = NotifySocket(path)
        self.address = self._socket.address

    def start(self, daemon: Daemon) -> float:
        """Seconds from spawning ``daemon`` to its READY=1 (it is then serving)."""
        seen = len(self._socket.with_field("READY", "1"))
        began = time.monotonic()
        daemon.start(timeout=180)
        deadline = time.monotonic() + 10
        while len(ready := self._socket.with_field("READY", "1")) == seen:
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon answered ready but never sent READY=1")
            time.sleep(0.01)
        return ready[seen].at - began

    def close(self) -> None:
        self._socket.close()


def _sessions(models: Sequence[Path]) -> str:
    """Statements creating an ORT session (CPU, log errors only) of each model file, with
    graph optimizations off as the daemon's warm start loads its cached optimized graphs."""
    off = "onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL"
    opts = "o = onnxruntime.SessionOptions(); o.log_severity_level = 3"
    opts += f"; o.graph_optimization_level = {off}"
    cpu = "providers=['CPUExecutionProvider']"
    made = ", ".join(f"onnxruntime.InferenceSession({str(m)!r}, o, {cpu})" for m in models)
    return f"{opts}; s = [{made}]; import ctypes; ctypes.CDLL(None).malloc_trim(0)"


def floor(repeat: int, models: Sequence[Path] = ()) -> tuple[float, float]:
    """(median seconds, VmRSS MiB) of a bare interpreter importing the daemon's libraries
    and, with ``models``, holding an ONNX Runtime session of each (what serving them costs
    before any code of ours: ORT's first-session set-up and the weights)."""
    seconds: list[float] = []
    rss = 0.0
    # os._exit: the clock stops at "ready", not after ORT tears its sessions down
    exit_now = "import os, sys; sys.stdout.flush(); os._exit(0)"
    code = f"{FLOOR}; {_sessions(models)}; {_RSS}; {exit_now}" if models else f"{FLOOR}; {_RSS}"
    for _ in range(repeat):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True, check=True, text=True, env={**os.environ, **BYTECODE},
        )  # fmt: skip
        seconds.append(time.perf_counter() - start)
        rss = int(out.stdout) / 1024
    return median(seconds), rss


def idle_rss(daemon: Daemon) -> float:
    time.sleep(1.0)  # background start-up tasks (watchers, expiry) settle
    return rss_mb(daemon_pid(daemon))


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


def _start_twice(
    clock: ReadyClock, kit: BenchKit, workdir: Path, config: dict[str, Any] | None = None
) -> tuple[tuple[float, float, float], Daemon]:
    """(cold READY s, warm READY s, idle RSS after the warm start); the daemon keeps running."""
    daemon = kit.daemon(workdir, config=config, env={"NOTIFY_SOCKET": clock.address, **BYTECODE})
    cold = clock.start(daemon)
    daemon.stop()
    warm = clock.start(daemon)
    return (cold, warm, idle_rss(daemon)), daemon


def _medians(rows: list[tuple[float, float, float]]) -> list[float]:
    return [median(column) for column in zip(*rows, strict=True)]


def _load_and_swap(daemon: Daemon, v2: Path, quick: bool) -> tuple[float, list[float]]:
    """(RSS after an 8-client MobileNet load, the `_swap` figures); checks v2 serves."""
    x = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
    big = np.random.default_rng(1).standard_normal((1, 3, 128, 128)).astype(np.float32)
    url = f"{daemon.url}/v1/adapters/mobilenet"
    bench_http.http_run(url, payload(big), {}, 8, 0.5 if quick else 5.0)
    loaded = rss_mb(daemon_pid(daemon))
    swap = asyncio.run(_swap(daemon, v2, payload(x), 0.5 if quick else 3.0))
    if _served_version(daemon, payload(x)) != "2":
        raise RuntimeError("after the hot swap digits v2 is not serving")
    return loaded, swap


def run(quick: bool) -> list[Figure]:
    """Floor, starts, swap and RSS; ``quick`` uses one start each and short loads."""
    m = get_models()
    starts = 1 if quick else 3
    floor_s, floor_rss = floor(3 if quick else 7)
    served_s, served_rss = floor(
        3 if quick else 7, [m.digits_fp32, m.anomaly_fp32, m.mobilenet_fp32]
    )
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        clock = ReadyClock(root / "notify")
        try:
            empty, kit = BenchKit(root / "empty"), BenchKit(root / "kit")
            for name, model in (("digits", m.digits_fp32), ("anomaly", m.anomaly_fp32),
                                ("mobilenet", m.mobilenet_fp32)):  # fmt: skip
                kit.build(name, model)
            v2 = kit.build("digits", m.digits_fp32, 2, out_dir=root)
            _start_twice(clock, kit, root / "warm-up")[1].stop()  # writes the bytecode cache
            bare, full = [], []
            for i in range(starts):
                figures, daemon = _start_twice(clock, empty, root / f"bare{i}")
                daemon.stop()
                bare.append(figures)
                config = {"http": {"management_token": TOKEN}}
                figures, daemon = _start_twice(clock, kit, root / f"d{i}", config)
                full.append(figures)
                if i < starts - 1:
                    daemon.stop()
            try:
                loaded, (p99_before, p99_during, put_s, failed, total) = _load_and_swap(
                    daemon, v2, quick
                )
            finally:
                daemon.stop()
        finally:
            clock.close()
    (bare_cold, bare_warm, bare_rss), (cold, warm, idle) = _medians(bare), _medians(full)
    return [
        Figure("floor", "import numpy+ort+wasmtime+aiohttp", floor_s, "s", "READY goal",
               GOAL_READY_S),
        Figure("floor", "VmRSS after those imports", floor_rss, "MB", "idle goal",
               GOAL_RSS_MB),
        Figure("floor", "imports + the 3 models' ORT sessions", served_s, "s", "READY goal",
               GOAL_READY_S),
        Figure("floor", "VmRSS with those sessions", served_rss, "MB", "idle goal",
               GOAL_RSS_MB),
        Figure("daemon", "READY, no bundles, warm (s)", bare_warm, "s", "import floor",
               floor_s),
        Figure("daemon", "READY, 3 bundles, cold (s)", cold, "s", "no bundles", bare_cold),
        Figure("daemon", "READY, 3 bundles, warm (s)", warm, "s", "goal", GOAL_READY_S),
        Figure("daemon", "idle RSS, no bundles", bare_rss, "MB", "import floor", floor_rss),
        Figure("daemon", "idle RSS, 3 bundles", idle, "MB", "goal", GOAL_RSS_MB),
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

"""The store-and-forward queue: events/s appended and drained, and what a draining stream
costs a request, in the same run.

``python -m bench.bench_store [--quick] [--json OUT]``

- In process (`wasmgate.runtime.field.store.Store` on a temporary directory, 200-byte
  events): appends from 64 concurrent appenders (they share group commits) under
  ``store.sync = "normal"`` and ``"full"``, appends one at a time, and a drain (peek 256,
  ack them) of what was appended.
- A real daemon serving the pass-through digits adapter, started with a backlog of events
  in its store while its broker is down (as during an outage): HTTP request latency
  p50/p99 with the backlog waiting (baseline, after a warm-up), then while it drains to a
  subscriber at the default ``store.drain_rate`` once mosquitto is back; and the rate the
  subscriber saw.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.common import Figure, median, percentile, script_main
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker
from wasmgate.runtime.field.store import Store, StreamLimits, Sync
from wasmgate.runtime.ops.config import StoreSettings

EVENT = b"e" * 200
LIMITS = {"events": StreamLimits(max_bytes=1 << 30)}
GATEWAY = "bench"


async def _append_rate(path: Path, n: int, sync: Sync, concurrent: int) -> float:
    async with Store(path, LIMITS, sync=sync) as store:
        start = time.perf_counter()
        for _ in range(n // concurrent):
            await asyncio.gather(*(store.append("events", EVENT) for _ in range(concurrent)))
        return n / (time.perf_counter() - start)


async def _drain_rate(path: Path) -> float:
    async with Store(path, LIMITS) as store:
        start, done = time.perf_counter(), 0
        while recs := await store.peek("events", limit=256):
            done += await store.ack("events", [r.id for r in recs])
        return done / (time.perf_counter() - start)


def in_process(root: Path, n: int) -> list[Figure]:
    normal = asyncio.run(_append_rate(root / "normal.db", n, "normal", 64))
    full = asyncio.run(_append_rate(root / "full.db", n, "full", 64))
    single = asyncio.run(_append_rate(root / "single.db", n // 8, "normal", 1))
    single_full = asyncio.run(_append_rate(root / "single-full.db", n // 8, "full", 1))
    drained = asyncio.run(_drain_rate(root / "normal.db"))
    base, one = "append x64, sync=normal", "one at a time, sync=normal"
    rows = [
        ("append x64 concurrent, sync=full", full, base, normal),
        ("append one at a time, sync=normal", single, base, normal),
        ("append one at a time, sync=full", single_full, one, single),
        ("drain (peek 256 + ack)", drained, base, normal),
    ]
    return [
        Figure("store", name, v, "ev/s", bn, b, lower_is_better=False) for name, v, bn, b in rows
    ]


async def _backlog(path: Path, n: int) -> None:
    async with Store(path, {"events": StreamLimits(1 << 30)}) as store:
        for _ in range(n // 100):
            await asyncio.gather(
                *(store.append("events", EVENT, {"adapter": "digits"}) for _ in range(100))
            )


def _subscriber(port: int, topic: str, *count: str) -> subprocess.Popen[bytes]:
    """``mosquitto_sub`` with a persistent session (a process of its own: a paho thread
    in this process would take the GIL from the HTTP client being timed)."""
    cmd = ["mosquitto_sub", "-p", str(port), "-t", topic, "-q", "1", "-i", "bench-store", "-c"]
    return subprocess.Popen([*cmd, *count], stdout=subprocess.DEVNULL)


def _request_ms(daemon: Daemon, body: bytes) -> float:
    start = time.perf_counter()
    req = urllib.request.Request(f"{daemon.url}/v1/adapters/digits", data=body)
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
    return (time.perf_counter() - start) * 1e3


def _latencies_until(daemon: Daemon, body: bytes, done: object, limit_s: float) -> list[float]:
    out: list[float] = []
    end = time.perf_counter() + limit_s
    while time.perf_counter() < end and not done():  # type: ignore[operator]
        out.append(_request_ms(daemon, body))
    return out


def with_daemon(root: Path, backlog: int, seconds: float) -> list[Figure]:
    broker = Broker(root / "mosquitto")
    broker.start()
    kit = BenchKit(root / "kit")
    kit.build("digits", get_models().digits_fp32)
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": GATEWAY}
    daemon = kit.daemon(root / "daemon", config={"mqtt": mqtt | {"reconnect_max_s": 0.5}})
    asyncio.run(_backlog(root / "daemon" / "data" / "state" / "store.db", backlog))
    topic = f"wasmgate/v1/{GATEWAY}/events/digits"
    _subscriber(broker.port, topic, "-E").wait(30)  # the session the broker keeps for it
    body = payload(np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32))
    counter: subprocess.Popen[bytes] | None = None
    try:
        broker.stop()
        daemon.start(timeout=120)
        _latencies_until(daemon, body, lambda: False, seconds)  # warm-up
        idle = _latencies_until(daemon, body, lambda: False, seconds)
        broker.start()
        back = time.perf_counter()  # the rate includes the daemon's reconnect (<= 0.5 s)
        counter = _subscriber(broker.port, topic, "-C", str(backlog))
        sub = counter
        during = _latencies_until(daemon, body, lambda: sub.poll() is not None, 600)
        rate = backlog / (time.perf_counter() - back) if counter.returncode == 0 else 0.0
    finally:
        try:
            daemon.stop()
        finally:  # a daemon that will not stop must not leave the broker holding our stdout
            if counter is not None and counter.poll() is None:
                counter.kill()
                counter.wait()
            broker.stop()
    configured = StoreSettings().drain_rate
    base_p50, base_p99 = median(idle), percentile(idle, 99)  # the backlog waiting
    return [
        Figure("store daemon", "HTTP p50, events stream draining", median(during), "ms",
               "p50, broker down", base_p50),
        Figure("store daemon", "HTTP p99, events stream draining", percentile(during, 99),
               "ms", "p99, broker down", base_p99),
        Figure("store daemon", f"drained to MQTT ({backlog} events)", rate, "ev/s",
               "store.drain_rate", configured, lower_is_better=False),
    ]  # fmt: skip


def run(quick: bool) -> list[Figure]:
    """In-process rates, then the daemon; quick: small counts and short windows."""
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        figures = in_process(root / "store", 640 if quick else 20_000)
        figures += with_daemon(root, 200 if quick else 3000, 0.5 if quick else 5.0)
    return figures


def main() -> None:
    script_main(__doc__, run, "small counts, short windows")


if __name__ == "__main__":
    main()

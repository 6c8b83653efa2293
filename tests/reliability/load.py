"""Load helpers for the reliability tests: closed-loop floods, sampled latencies, peak RSS.

Everything is bounded: a flood stops at its deadline or its request budget, whichever is
first, and every client talks to loopback only.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Self

import aiohttp

from tests.fixtures.benchkit import rss_mb

# A tenant's p99 under someone else's attack may be at most FACTOR x its unloaded p99 +
# SLACK_S: generous, because the attackers' native runs share the (2, loaded) cores with it.
# Queued behind a flood's backlog instead it waits seconds (measured: p99 2 s, FIFO pool).
FACTOR = 10.0
SLACK_S = 0.5


def latency_bound(unloaded: Tally) -> float:
    """The p99 a tenant may reach under attack, from its unloaded answers."""
    return FACTOR * unloaded.p(0.99) + SLACK_S


@dataclass
class Tally:
    """Statuses and latencies (seconds) of one client group."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    answers: list[tuple[int, float]] = field(default_factory=list)

    def add(self, status: int, took: float) -> None:
        self.statuses[status] += 1
        self.latencies.append(took)
        self.answers.append((status, took))

    def since(self, start: int) -> Tally:
        """The answers from the ``start``-th on (those while something else happened)."""
        tally = Tally()
        for status, took in self.answers[start:]:
            tally.add(status, took)
        return tally

    @property
    def count(self) -> int:
        return sum(self.statuses.values())

    @property
    def errors(self) -> int:
        return self.count - self.statuses[200]

    def p(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the latencies, nearest rank."""
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> str:
        return f"{dict(self.statuses)} p50 {self.p(0.5):.3f}s p99 {self.p(0.99):.3f}s"


async def closed_loop(
    url: str,
    body: bytes,
    clients: int,
    seconds: float,
    *,
    headers: Mapping[str, str] | None = None,
    stop: threading.Event | None = None,
    tally: Tally | None = None,
) -> Tally:
    """``clients`` concurrent clients POST ``body`` back to back for ``seconds`` (or ``stop``)."""
    tally = Tally() if tally is None else tally
    end = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def client() -> None:
            while time.monotonic() < end and not (stop is not None and stop.is_set()):
                start = time.monotonic()
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
                    tally.add(r.status, time.monotonic() - start)

        await asyncio.gather(*(client() for _ in range(clients)))
    return tally


class Background:
    """A thread that runs ``_run`` from the start of a ``with`` block until ``_stop`` is set
    at its end."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Flood(Background):
    """`closed_loop` in a background thread (its own event loop) until the block ends."""

    def __init__(
        self,
        url: str,
        body: bytes,
        clients: int,
        max_s: float,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.tally = Tally()
        self._args = (url, body, clients, max_s)
        self._headers = headers

    def _run(self) -> None:
        loop = closed_loop(*self._args, headers=self._headers, stop=self._stop, tally=self.tally)
        asyncio.run(loop)


def sample(
    url: str,
    body: bytes,
    count: int,
    *,
    pause_s: float = 0.02,
    headers: Mapping[str, str] | None = None,
) -> Tally:
    """``count`` sequential POSTs from this thread, ``pause_s`` apart (a quiet tenant)."""
    tally = Tally()
    for _ in range(count):
        req = urllib.request.Request(url, data=body, method="POST", headers=dict(headers or {}))
        start = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            e.read()
            status = e.code
        tally.add(status, time.monotonic() - start)
        time.sleep(pause_s)
    return tally


def wait_for_load(flood: Flood, requests: int, timeout: float) -> None:
    """Block until the flood has had ``requests`` answers (so the daemon is saturated)."""
    deadline = time.monotonic() + timeout
    while flood.tally.count < requests:
        if time.monotonic() > deadline:
            raise TimeoutError(f"flood got only {flood.tally.count} answers in {timeout}s")
        time.sleep(0.05)


def steady_tenant(url: str, body: bytes, max_s: float) -> Flood:
    """A normal tenant: one client, one request at a time, for the whole scenario."""
    return Flood(url, body, 1, max_s)


def measure(steady: Flood, count: int, timeout: float) -> Tally:
    """The steady tenant's next ``count`` answers (from now on)."""
    start = steady.tally.count
    wait_for_load(steady, start + count, timeout)
    return steady.tally.since(start)


class RssSampler(Background):
    """Peak VmRSS of a process, sampled every 20 ms in a thread."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid, self.peak = pid, 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)

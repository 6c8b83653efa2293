"""The cloud fallback endpoint flapping (up, 503, refused, too slow) under load.

A real daemon serves the example ``digits`` adapter, which asks for cloud fallback when
its confidence is low (``ambiguous.json``) and answers confident inputs (``seven.json``)
itself. The fake cloud (aiohttp on loopback, ``cloud.protocol = "raw"``) changes mode
every few hundred ms while 4 clients send both kinds. Proves: confident requests never touch the
cloud; low-confidence ones always get an answer (the cloud's, or the weak local one when
the cloud fails, as the policy says), never a 5xx and never later than the cloud timeout
allows; the circuit breaker does not stay open once the cloud is back.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable

import aiohttp
import pytest
from aiohttp import web

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.reliability.conftest import example_bundle
from wasmgate.guest_adapters.examples import example_dir

CLOUD_ANSWER = b'{"digit": 8, "from": "cloud"}'
MODES = ("up", "error", "down", "slow", "up")
TIMEOUT_S = 0.5
JSON = {"Content-Type": "application/json"}


class FlappingCloud:
    """POST /v1/adapters/{name}: answers, 503s, refuses or resets connections, or stalls."""

    def __init__(self) -> None:
        self.port = free_port()
        self.mode = "up"
        self.calls: Counter[str] = Counter()
        app = web.Application()
        app.router.add_post("/v1/adapters/{name}", self._adapter)
        self._runner = web.AppRunner(app)
        self._site: web.TCPSite | None = None

    async def _adapter(self, request: web.Request) -> web.Response:
        await request.read()
        self.calls[self.mode] += 1
        if self.mode == "down" and request.transport is not None:
            request.transport.close()  # a kept-alive connection dies too: connection reset
            raise web.HTTPServiceUnavailable
        if self.mode == "error":
            return web.json_response({"error": "maintenance"}, status=503)
        if self.mode == "slow":
            await asyncio.sleep(TIMEOUT_S * 4)
        return web.Response(body=CLOUD_ANSWER, content_type="application/json")

    async def start(self) -> None:
        await self._runner.setup()
        await self.set("up")

    async def set(self, mode: str) -> None:
        self.mode = mode
        if mode == "down" and self._site is not None:
            await self._site.stop()
            self._site = None
        elif mode != "down" and self._site is None:
            self._site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            await self._site.start()

    async def close(self) -> None:
        await self._runner.cleanup()


async def _flap(cloud: FlappingCloud, stop: float, done: asyncio.Event) -> None:
    """Cycle the modes, every one at least once, then until ``stop``; each stays until the
    daemon's calls reached it (the breaker may hold them back for ``breaker_reset_s``), at
    most 1.5 s, then 0.2 s more. On a busy machine one pass takes longer than ``stop``
    allows: the pass is finished all the same (the clients run until ``done``)."""
    try:
        for n, mode in enumerate(itertools.cycle(MODES)):
            if n >= len(MODES) and time.monotonic() > stop:
                return
            await cloud.set(mode)
            seen, until = cloud.calls[mode], time.monotonic() + 1.5
            while cloud.calls[mode] == seen and time.monotonic() < until:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
    finally:
        done.set()


Result = tuple[str, int, str, float]


async def _client(
    url: str, bodies: list[tuple[str, bytes]], stopped: Callable[[list[Result]], bool]
) -> list[Result]:
    """(kind, status, source, seconds) for each request until ``stopped(results so far)``
    (at most 400)."""
    out: list[Result] = []
    async with aiohttp.ClientSession() as session:
        for kind, body in itertools.cycle(bodies):
            if stopped(out) or len(out) >= 400:
                return out
            start = time.monotonic()
            async with session.post(url, data=body, headers=JSON) as r:
                await r.read()
                out.append((kind, r.status, r.headers.get("X-Wasmgate-Source", "?"),
                            time.monotonic() - start))  # fmt: skip
    return out


def _from_cloud(last: list[Result]) -> bool:
    return len(last) == 5 and all(r[1:3] == (200, "cloud") for r in last)


@pytest.mark.timeout(90)
async def test_flapping_cloud_under_load(
    tmp_path_factory: pytest.TempPathFactory, daemon_factory: Callable[..., Daemon]
) -> None:
    cloud = FlappingCloud()
    await cloud.start()
    kit = BenchKit(tmp_path_factory.mktemp("kit"))
    example_bundle(kit, "digits")
    settings = {"url": f"http://127.0.0.1:{cloud.port}", "protocol": "raw",
                "timeout_s": TIMEOUT_S, "breaker_failures": 3, "breaker_reset_s": 0.3,
                "breaker_window": 10}  # fmt: skip
    samples = example_dir("digits") / "samples"
    bodies = [("confident", (samples / "seven.json").read_bytes()),
              ("ambiguous", (samples / "ambiguous.json").read_bytes())]  # fmt: skip
    try:
        daemon = await asyncio.to_thread(daemon_factory, config=kit.config({"cloud": settings}))
        url = f"{daemon.url}/v1/adapters/digits"
        done = asyncio.Event()
        clients = asyncio.gather(*(_client(url, bodies, lambda _: done.is_set()) for _ in range(4)))
        await _flap(cloud, time.monotonic() + 4.0, done)
        results = [r for per_client in await clients for r in per_client]
        await cloud.set("up")
        # until five answers in a row come from the cloud: the breaker closed again once
        # its reset time let a probe through (bounded: it might never)
        give_up = time.monotonic() + 15.0
        recovered = await _client(
            url, bodies[1:], lambda out: _from_cloud(out[-5:]) or time.monotonic() > give_up
        )
    finally:
        await cloud.close()
    assert {status for _, status, _, _ in results} == {200}, Counter(r[1] for r in results)
    sources = Counter((kind, source) for kind, _, source, _ in results)
    assert sources[("confident", "cloud")] == 0, sources
    assert sources[("ambiguous", "cloud")] > 0, sources
    assert sources[("ambiguous", "local")] > 0, sources  # weak local answer while down
    assert max(seconds for *_, seconds in results) < TIMEOUT_S + 2.0
    assert {"error", "slow"} <= set(cloud.calls), cloud.calls  # "down" mostly refuses
    assert _from_cloud(recovered[-5:]), recovered[-5:]
    assert daemon.proc is not None
    assert daemon.proc.poll() is None
    assert "Traceback" not in daemon.log()

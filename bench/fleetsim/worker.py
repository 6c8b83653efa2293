"""A worker process of the simulator: ``count`` gateways on one asyncio loop.

``python -m bench.fleetsim.worker CONFIG.json FIRST COUNT``; commands arrive on stdin, one
JSON object a line, answers leave on stdout the same way:

- ``{"cmd": "wait"}`` -> ``{"connected": n}`` once every gateway not stopped is connected;
- ``{"cmd": "stop"|"start", "names": [...]}`` -> ``{"ok": true}`` (a power cut, a return);
- ``{"cmd": "fail", "names": [...]}`` -> from now on those gateways' pulls fail;
- ``{"cmd": "stats"}`` -> connects and pulls per second, RSS and CPU of this process;
- ``{"cmd": "quit"}``.

Why a few thousand gateways per process: each holds one socket (``RLIMIT_NOFILE`` is raised
to its hard limit here) and ~0.3 MB of Python objects; one loop spends its time in TLS-less
paho parsing and ed25519, so more processes than CPUs only add context switches.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench.fleetsim.gateway import Events, SimConfig, SimGateway
from wasmgate.signing.trust import TrustStore

_OPEN_PER_S = 100.0
"""Gateways this worker opens per second at start (the broker's accept queue is finite)."""


def _raise_nofile() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _usage() -> dict[str, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"rss_mb": ru.ru_maxrss / 1024, "cpu_s": ru.ru_utime + ru.ru_stime}


class Worker:
    def __init__(self, cfg: SimConfig, trust: TrustStore, names: list[str]) -> None:
        self.events = Events(time.time)
        self.gateways = {n: SimGateway(n, cfg, trust, self.events) for n in names}
        self.down: set[str] = set()
        self.cfg = cfg

    async def open(self, per_s: float) -> None:
        for i, gw in enumerate(self.gateways.values()):
            await gw.open()
            if i % 10 == 9:
                await asyncio.sleep(10 / per_s)

    async def wait(self) -> dict[str, Any]:
        while True:
            up = [g for n, g in self.gateways.items() if n not in self.down]
            if all(g.client is not None and g.client.connected for g in up):
                return {"connected": len(up)}
            await asyncio.sleep(0.2)

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        names = [n for n in req.get("names", []) if n in self.gateways]
        if cmd == "wait":
            return await self.wait()
        if cmd == "stop":
            self.down |= set(names)
            await asyncio.gather(*(self.gateways[n].stop() for n in names))
        elif cmd == "start":
            self.down -= set(names)
            for n in names:
                await self.gateways[n].start()
        elif cmd == "fail":
            self.gateways_fail(set(names))
        elif cmd == "stats":
            ev = self.events
            return {"connects": ev.connects, "pulls": ev.pulls, **_usage()}
        return {"ok": True}

    def gateways_fail(self, names: set[str]) -> None:
        for n, gw in self.gateways.items():
            gw.failing = n in names

    async def close(self) -> None:
        await asyncio.gather(*(g.close() for g in self.gateways.values()))


async def serve(config: Path, first: int, count: int) -> None:
    doc = json.loads(config.read_text())
    cfg = SimConfig(doc["host"], doc["port"], Path(doc["root"]), doc["group"], doc["spread_s"])
    trust = TrustStore.from_bytes(Path(doc["trust"]).read_bytes(), doc["trust"])
    worker = Worker(cfg, trust, [f"gw-{i:05d}" for i in range(first, first + count)])
    await worker.open(float(doc.get("open_per_s", _OPEN_PER_S)))
    try:
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:
                break
            req = json.loads(line)
            if req["cmd"] == "quit":
                break
            print(json.dumps(await worker.handle(req)), flush=True)
    finally:
        await worker.close()


def main() -> None:
    _raise_nofile()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    asyncio.run(serve(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))


if __name__ == "__main__":
    main()

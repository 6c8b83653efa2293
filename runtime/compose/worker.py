"""A data-plane worker's life (``[workers] count`` > 1; `wasmgate.runtime.supervisor`).

Forked from the zygote (`wasmgate.runtime.compose.zygote`) or, without one, started by the
supervisor as ``wasmgate serve --worker`` with its `WorkerSpec` on stdin.
It builds the same app as the single daemon, minus what the supervisor owns (the bundle
folder's watcher, the fleet member, MQTT: `build_app`'s ``forward``; its gRPC listener binds
the gateway's gRPC port beside its siblings', `wasmgate.runtime.grpc.server`), listens on its
private Unix socket at once (the supervisor's probes), loads the bundles from the store the
supervisor wrote, and only then accepts on the gateway's port (the inherited socket), so a
worker that is still loading never takes a connection. Its Python threads run on the CPU
the plan gives it; ONNX Runtime's pools on every allowed CPU.

SIGTERM (a stop, or a replacement): it stops accepting, answers what its open connections
still send with ``Connection: close`` until they are gone (at most ``drain_s``), then drains
and exits. SIGHUP re-reads the config file's live settings, with its share of the caps.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.compose.app_keys import DEDUPE_TABLE, GRPC, REPLACES, WORKER_INDEX
from wasmgate.runtime.compose.lifecycle import Signals, opened, serve, ssl_context
from wasmgate.runtime.http import status
from wasmgate.runtime.http.connections import GuardedSockSite
from wasmgate.runtime.http.forward import Forwarder
from wasmgate.runtime.http.keys import CONNECTIONS, METRICS, SERVICE
from wasmgate.runtime.ops import offload, startgc
from wasmgate.runtime.ops.config import LimitSettings
from wasmgate.runtime.ops.confine import confine_worker
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.live import LiveSettings
from wasmgate.runtime.ops.logs import setup_logging
from wasmgate.runtime.ops.parentage import die_with
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.runtime.serving.slots import GatewaySlots
from wasmgate.runtime.supervisor.children import WorkerSpec, decode_spec
from wasmgate.runtime.supervisor.plan import share_limits

__all__ = ["read_spec", "run_worker"]

log = logging.getLogger("wasmgate.worker")


def read_spec() -> WorkerSpec:
    """The spec the supervisor wrote on this process's stdin (an exec'd worker); from here
    on this process dies with the supervisor, however it ends
    (`wasmgate.runtime.ops.parentage.die_with`)."""
    try:
        alive = die_with(os.getppid())
    except OSError as e:
        log.warning("cannot ask to die with the supervisor: %s", e)
        alive = True
    if not alive:  # the supervisor ended before the request took effect
        os._exit(1)
    return decode_spec(sys.stdin.buffer.read())


async def run_worker(spec: WorkerSpec) -> int:
    settings = spec.settings
    setup_logging(settings.log.format, settings.log.level)
    confine_worker(settings, Path(spec.slots).parent, spec.config_path)  # before any thread
    cpus = _place(spec, pin=settings.workers.cpu_affinity == "auto")
    offload.install(asyncio.get_running_loop(), cpus.count)  # every thread it will have, now
    config = None if spec.config_path is None else Path(spec.config_path)
    live = LiveSettings(settings, config)

    def share(limits: LimitSettings) -> LimitSettings:
        return share_limits(limits, spec.part, spec.parts)

    slots = GatewaySlots(Path(spec.slots), spec.slot_column)
    async with Forwarder(spec.control, settings.drain_s + 60, spec.private) as forward:
        app = build_app(
            settings, live, Notifier({}), listen_first=True, cpus=cpus, forward=forward,
            slots=slots,
        )  # fmt: skip
        app[WORKER_INDEX], app[DEDUPE_TABLE] = spec.index, Path(spec.dedupe)
        if spec.replaces is not None:
            app[REPLACES] = spec.replaces
        runner = web.AppRunner(
            app, shutdown_timeout=settings.drain_s / 2, access_log=None,
            keepalive_timeout=settings.http.header_timeout_s,
        )  # fmt: skip
        await runner.setup()
        signals = Signals()
        try:
            await web.UnixSite(runner, spec.private).start()
            if await opened(app, signals.stop):
                public = GuardedSockSite(
                    runner, socket.socket(fileno=spec.listen_fd), app[CONNECTIONS],
                    ssl_context=ssl_context(settings),
                )  # fmt: skip
                await public.start()
                log.info("worker %d serving", spec.index, extra={"cpu": spec.cpu})
                startgc.serving()
                await serve(app, Notifier({}), signals, share=share, worker=True)
                await _stop_accepting(app, public, settings.drain_s)
        finally:
            service = app[SERVICE]
            if isinstance(service, InferenceService):
                service.start_draining()
            page = _final_page(app)  # while its models are loaded: the page's rows
            await runner.cleanup()
            await forward.retire(_final_counts(app, page))
    slots.close()
    return 0


def _final_page(app: web.Application) -> dict[str, Any]:
    """This worker's ``/v1/status`` document, its last before it unloads."""
    try:
        return status.document(app)
    except Exception:
        log.exception("this worker's final status could not be read")
        return {}


def _final_counts(app: web.Application, page: dict[str, Any]) -> bytes:
    """This worker's ``/metrics`` once it answers nothing more and its last status page
    (a collector reading something already closed must not keep the rest from the
    supervisor)."""
    try:
        metrics = app[METRICS].exposition()[0].decode()
    except Exception:
        log.exception("this worker's final counts could not be read")
        metrics = ""
    return jsonio.dumps({"metrics": metrics, "status": page})


def _place(spec: WorkerSpec, *, pin: bool) -> CpuPlan:
    """The gateway's CPUs for native pools, this worker's one for its Python threads (the
    supervisor's pinned affinity is what the process inherited: widened first)."""
    allowed = frozenset(spec.allowed)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, allowed)
    cpus = CpuPlan(allowed, frozenset({spec.cpu}) if pin and len(allowed) > 1 else allowed)
    cpus.apply()
    return cpus


async def _stop_accepting(app: web.Application, public: web.BaseSite, drain_s: float) -> None:
    """Stop taking connections; let the open ones go (each answer closes its connection)
    for half the drain, the other half left to the requests still running (the supervisor
    ends a worker after ``drain_s``). gRPC stops with HTTP: its clients' next RPCs go to the
    other workers while the running ones finish."""
    guard = app[CONNECTIONS]
    guard.closing = True
    # gRPC's stop starts first: once the HTTP listener is closed, the roll goes on
    # (`children.retire`), and no RPC may reach this worker's version after that.
    grpc = app.get(GRPC)
    stopping = asyncio.ensure_future(grpc.stop(drain_s / 2)) if grpc is not None else None
    await asyncio.sleep(0)
    # Every connection the listener gave this worker is counted by the guard once the
    # site stopped (`GuardedSockSite.stop`): the drain below waits for each.
    await public.stop()
    deadline = time.monotonic() + drain_s / 2
    # Polled: a connection ends in aiohttp's protocol, which has no hook to wait on.
    while guard.unfinished() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    if stopping is not None:
        await stopping

"""The supervisor's life (``[workers] count`` > 1; `wasmgate.runtime.supervisor`).

The supervisor binds the gateway's HTTP port but never accepts on it: its workers do, on
the socket they inherit. It runs the single daemon's app on a private Unix socket (in a
0700 directory of its own) for what the workers forward, with everything that must have
one owner: installs and the state files, trust, the bundle folder's watcher, the fleet
member, MQTT, systemd's notify and watchdog. The workers serve gRPC, each on the gRPC port
with ``SO_REUSEPORT``, which the supervisor checks and holds (`GatewayPorts`). READY=1 once
its bundles are loaded and every worker serves. A change of what serves (an install, a
removal, a promotion, a trust change) replaces the workers one at a time; SIGHUP reloads the
supervisor, then each worker; SIGTERM stops the workers (each finishes what it has), then
the supervisor.
"""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
import time
from pathlib import Path

from aiohttp import web

from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.compose.app_keys import DEDUPE_TABLE, SETTLE
from wasmgate.runtime.compose.lifecycle import (
    Signals,
    bind_public,
    end_unused_worker_sessions,
    opened,
    serve,
    summary,
    tell,
)
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.http.keys import REGISTRY, SERVICE
from wasmgate.runtime.ops import startgc
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.live import LiveSettings
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.ops.tasks import background
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.runtime.serving.slots import GatewaySlots
from wasmgate.runtime.supervisor.gateway import install, relay_variables
from wasmgate.runtime.supervisor.outcomes import Outcomes
from wasmgate.runtime.supervisor.plan import WorkerPlan, share_limits
from wasmgate.runtime.supervisor.pool import WorkerPool
from wasmgate.runtime.supervisor.ports import GatewayPorts
from wasmgate.runtime.supervisor.rolling import Rolling
from wasmgate.runtime.supervisor.zygote import Seed
from wasmgate.typed import replace

__all__ = ["run_supervised"]

log = logging.getLogger("wasmgate.supervisor")


async def run_supervised(
    settings: Settings,
    config_path: Path | None,
    plan: WorkerPlan,
    cpus: CpuPlan,
    zygote: Seed | None = None,  # the one `serve` forked for the workers: the pool adopts it
) -> int:
    parts = plan.count + 1
    own = replace(settings, limits=share_limits(settings.limits, 0, parts))
    notifier = Notifier()
    run_dir = Path(tempfile.mkdtemp(prefix="wasmgate-"))  # 0700: the sockets' only door
    listeners, ports, serving = _open_ports(settings, plan.count)
    own = replace(own, grpc=replace(own.grpc, port=None))  # the workers serve gRPC
    slots = GatewaySlots(run_dir / "slots", 0)
    pool = WorkerPool(plan, serving, config_path, listeners, run_dir, slots=slots, seed=zygote)
    app = build_app(
        own, LiveSettings(own, config_path), notifier,
        listen_first=True, cpus=cpus, slots=slots, supervisor=True,
    )  # fmt: skip
    app[DEDUPE_TABLE] = pool.dedupe
    install(app, pool, ports)
    rolling = Rolling(pool)
    app[SETTLE] = rolling.settled  # the fleet says applied once every worker serves it
    app.middlewares.append(rolling.middleware())
    runner = web.AppRunner(app, shutdown_timeout=settings.drain_s, access_log=None)
    notifier.status("starting")
    started = time.monotonic()
    try:
        await runner.setup()
        await web.UnixSite(runner, pool.control).start()
        address = listeners[0].getsockname()
        log.info("listening", extra={"address": f"{address[0]}:{address[1]}", "workers": plan.count,
                                     "why": plan.why})  # fmt: skip
        signals = Signals()
        if await opened(app, signals.stop):
            # Hooked before the workers start: the first one to serve may take an install
            # while the others load, and that change must reach them all (a roll waits for
            # the start).
            app[REGISTRY].on_change.append(rolling.changed)
            relay_variables(app, pool)
            outcomes = Outcomes(app[REGISTRY].table, pool)
            sessions = end_unused_worker_sessions(settings, plan.count)
            async with (
                rolling,
                background(outcomes.run(), "worker-outcomes"),
                background(sessions, "mqtt-sessions"),
            ):
                await pool.start()
                ports.check()  # nothing outside the gateway listens on its ports
                log.info("ready", extra={"startup_s": round(time.monotonic() - started, 2)})
                notifier.ready(f"{summary(app)}, {plan.count} workers")
                # STATUS= says what the workers serve: it follows a change once rolled.
                rolling.on_settled.append(lambda: tell(notifier, summary(app)))
                startgc.serving()
                await serve(app, notifier, signals, after_reload=pool.hup,
                            share=lambda lim: share_limits(lim, 0, parts))  # fmt: skip
    finally:
        notifier.stopping()
        log.info("stopping", extra={"drain_s": settings.drain_s})
        service = app.get(SERVICE)  # absent when the start failed before the service
        if isinstance(service, InferenceService):
            service.start_draining()  # gRPC and MQTT refuse new work as the workers do
        await pool.stop(settings.drain_s)
        await runner.cleanup()
        for sock in listeners:
            sock.close()
        ports.close()
        slots.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        log.info("stopped")
    return 0


def _open_ports(
    settings: Settings, count: int
) -> tuple[list[socket.socket], GatewayPorts, Settings]:
    """The workers' HTTP sockets, the gRPC port held for them, and the workers' settings
    (with the gRPC port the kernel chose for port 0)."""
    listeners = bind_public(settings, count)
    ports = GatewayPorts(settings, listeners[0].getsockname()[1])
    try:
        return listeners, ports, ports.reserve_grpc()
    except ConfigError:
        for sock in listeners:
            sock.close()
        raise

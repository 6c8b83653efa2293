"""The daemon's lifecycle: build the app, serve, reload on SIGHUP, drain on SIGTERM, stop.

The HTTP listener comes up first, then the start-up bundles load (the status page shows
how far; ``/v2/health/ready`` is 503 until done). systemd (``Type=notify``): ``READY=1``
once the start-up bundles are loaded and every listener is up;
``WATCHDOG=1`` from the event loop while serving; ``RELOADING=1`` … ``READY=1``
around a reload; ``STOPPING=1`` when the drain starts.

SIGHUP re-reads the config file: the log level, management token, limits (but the
thread counts ``limits.workers`` and ``limits.batch_workers``) and
``[variables.<bundle>]`` apply at once;
the trust store is re-read (bundles it no longer accepts are unloaded) and the bundle
directory rescanned, retrying the files refused before. The trust file is also watched: a
change on disk (``wasmgate trust add``) applies within a second or two without SIGHUP.
Settings that need a restart (listen address, paths, MQTT, cloud, profile, the two thread
counts) are logged and keep their running value. An invalid file changes nothing.
SIGTERM/SIGINT: new requests get 503, in-flight ones get up to ``drain_s``, then exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from aiohttp import web

from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.compose.lifecycle import (
    ListenError,
    Signals,
    check_listen,
    end_unused_worker_sessions,
    host_port,
    listen_problem,
    opened,
    place_threads,
    serve,
    ssl_context,
    status_url,
    summary,
    tell,
)
from wasmgate.runtime.compose.supervised import run_supervised
from wasmgate.runtime.http.connections import GuardedSite
from wasmgate.runtime.http.keys import CONNECTIONS, REGISTRY, SERVICE
from wasmgate.runtime.ops import offload, startgc
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.live import LiveSettings
from wasmgate.runtime.ops.logs import setup_logging
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.ops.tasks import background
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.runtime.supervisor.plan import plan_workers
from wasmgate.runtime.supervisor.zygote import Seed

__all__ = ["ListenError", "check_listen", "run_daemon"]

log = logging.getLogger("wasmgate.daemon")


async def run_daemon(
    settings: Settings, config_path: Path | None = None, zygote: Seed | None = None
) -> int:
    """Serve until SIGTERM/SIGINT, then drain in-flight requests for at most ``drain_s``.

    ``config_path`` is the file SIGHUP re-reads (None: the default file, if it exists).
    The HTTP listener is up before the start-up bundles are loaded
    (`wasmgate.runtime.compose.opening`): ``/v2/health/live`` and the status page answer at
    once, ``/v2/health/ready`` and systemd's READY=1 wait for the loading. ``zygote``:
    the one ``serve`` forked for the workers (`wasmgate.runtime.compose.zygote`).
    """
    setup_logging(settings.log.format, settings.log.level)
    plan = plan_workers(settings, CpuPlan.current())
    cpus = place_threads(settings.workers.cpu_affinity == "auto")
    offload.install(asyncio.get_running_loop(), cpus.count)  # every thread it will have, now
    if plan.count > 1:
        return await run_supervised(settings, config_path, plan, cpus, zygote)
    notifier = Notifier()
    app = build_app(
        settings, LiveSettings(settings, config_path), notifier, listen_first=True, cpus=cpus
    )
    # keepalive_timeout is also aiohttp's only bound on a request's headers arriving.
    runner = web.AppRunner(
        app,
        shutdown_timeout=settings.drain_s,
        access_log=None,
        keepalive_timeout=settings.http.header_timeout_s,
    )
    notifier.status("starting")
    check_listen(settings.http)
    started = time.monotonic()
    await _listen(runner, settings)
    log.info(
        "listening",
        extra={
            "addresses": [host_port(a) for a in runner.addresses],
            "startup_s": round(time.monotonic() - started, 2),
        },
    )
    log.info("status page: %s (ready once the bundles are loaded)", status_url(settings, runner))
    signals = Signals()
    try:
        if await opened(app, signals.stop):
            log.info("ready", extra={"startup_s": round(time.monotonic() - started, 2)})
            notifier.ready(summary(app))
            # STATUS= follows installs and removals (folder, API, fleet), not only reloads.
            app[REGISTRY].on_change.append(lambda: tell(notifier, summary(app)))
            startgc.serving()  # what the start made is out of every later collection
            async with background(end_unused_worker_sessions(settings, 0), "mqtt-sessions"):
                await serve(app, notifier, signals)
    finally:
        notifier.stopping()
        service = app[SERVICE]
        if isinstance(service, InferenceService):
            service.start_draining()
        log.info("stopping", extra={"drain_s": settings.drain_s})
        await runner.cleanup()
        log.info("stopped")
    return 0


async def _listen(runner: web.AppRunner, settings: Settings) -> None:
    """Set the runner up (stage one: quick) and start the HTTP listener."""
    try:
        await runner.setup()
        site = GuardedSite(
            runner,
            settings.http.host,
            settings.http.port,
            runner.app[CONNECTIONS],
            ssl_context=ssl_context(settings),
        )
        try:
            await site.start()
        except OSError as e:
            raise listen_problem(settings.http, e) from e
    except BaseException:
        await runner.cleanup()
        raise

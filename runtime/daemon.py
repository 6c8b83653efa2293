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
import errno
import logging
import shutil
import signal
import socket
import ssl
import time
from pathlib import Path

from aiohttp import web

from wasmgate.runtime.app import build_app, ceilings
from wasmgate.runtime.app_keys import DEPS, OPENING, WATCHER
from wasmgate.runtime.app_service import load_trust
from wasmgate.runtime.errors import ConfigError, DaemonError
from wasmgate.runtime.http.connections import GuardedSite
from wasmgate.runtime.http.keys import CONNECTIONS, FLEET, LIVE, REGISTRY, SERVICE
from wasmgate.runtime.http.variables import VARIABLES
from wasmgate.runtime.ops import offload, startgc
from wasmgate.runtime.ops.config import HttpSettings, Settings, load_settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.live import LiveSettings
from wasmgate.runtime.ops.logs import setup_logging
from wasmgate.runtime.ops.systemd import Notifier
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.signing.errors import SigningError
from wasmgate.typed import fields, replace

log = logging.getLogger("wasmgate.daemon")

_RESTART_ONLY = ("mqtt", "grpc", "paths", "cloud", "profile", "fleet", "workers")
_HTTP_LIVE = ("management_token",)
_FIELDS_AT_START = {
    "http": tuple(k for k in fields(HttpSettings) if k not in _HTTP_LIVE),  # listener
    "limits": ("workers", "batch_workers"),  # the thread pools, built once at start
}
"""Fields read only at start (`wasmgate.runtime.app`) of sections that otherwise apply at once."""


class ListenError(DaemonError):
    """The HTTP listener cannot bind its address (in use, not permitted, not local)."""


def _listen_problem(http: HttpSettings, err: OSError) -> ListenError:
    where = f"{http.host}:{http.port}"
    if err.errno == errno.EADDRINUSE:
        # ss is iproute2's, which a minimal Debian lacks: say where it comes from then.
        ss = "" if shutil.which("ss") else " (ss: apt install iproute2)"
        hint = (
            "address already in use (is another wasmgate running? "
            f"ss -ltnp 'sport = :{http.port}'{ss})"
        )
    elif err.errno == errno.EACCES:
        hint = "permission denied (ports below 1024 need privileges)"
    else:
        hint = err.strerror or str(err)
    return ListenError(f"cannot listen on {where}: {hint}; set http.port or --port")


def check_listen(http: HttpSettings) -> None:
    """Bind and release the HTTP address once, so a port in use is reported before the
    (possibly long) bundle loading rather than after it. Port 0 always binds."""
    if http.port == 0:
        return
    try:
        infos = socket.getaddrinfo(
            http.host, http.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _name, addr in infos:
            with socket.socket(family, kind, proto) as sock:
                # The same option the real listener uses, so TIME_WAIT leftovers don't count.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(addr)
    except OSError as e:
        raise _listen_problem(http, e) from e


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    cert, key = settings.http.tls_cert, settings.http.tls_key
    if cert is None or key is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


def _place_threads(pin: bool) -> CpuPlan:
    """Python threads on one CPU, before the app starts any (`wasmgate.runtime.ops.cpus`)."""
    cpus = CpuPlan.current()
    cpus = cpus.one_cpu() if pin else cpus
    if cpus.pinned:
        cpus.apply()
        log.info(
            "python threads on CPU %s of %s (one interpreter runs on one CPU at a time; "
            "inference threads use all of them)",
            _cpu_list(cpus.python),
            _cpu_list(cpus.allowed),
        )
    return cpus


def _cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _summary(app: web.Application) -> str:
    service = app[SERVICE]
    infos = service.list_models()
    models = sum(1 for i in infos if i.kind == "model")
    return f"serving {len(service.adapter_names())} adapters, {models} models"


def _tell(notifier: Notifier, status: str) -> None:
    notifier.status(status)  # a lost datagram is not worth more than systemd's next one


async def run_daemon(settings: Settings, config_path: Path | None = None) -> int:
    """Serve until SIGTERM/SIGINT, then drain in-flight requests for at most ``drain_s``.

    ``config_path`` is the file SIGHUP re-reads (None: the default file, if it exists).
    The HTTP listener is up before the start-up bundles are loaded (`wasmgate.runtime.opening`):
    ``/v2/health/live`` and the status page answer at once, ``/v2/health/ready`` and
    systemd's READY=1 wait for the loading.
    """
    setup_logging(settings.log.format, settings.log.level)
    cpus = _place_threads(settings.workers.cpu_affinity == "auto")
    offload.install(asyncio.get_running_loop(), cpus.count)  # every thread it will have, now
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
            "addresses": [_host_port(a) for a in runner.addresses],
            "startup_s": round(time.monotonic() - started, 2),
        },
    )
    log.info("status page: %s (ready once the bundles are loaded)", status_url(settings, runner))
    signals = _Signals()
    try:
        if await _opened(app, signals.stop):
            log.info("ready", extra={"startup_s": round(time.monotonic() - started, 2)})
            notifier.ready(_summary(app))
            # STATUS= follows installs and removals (folder, API, fleet), not only reloads.
            app[REGISTRY].on_change.append(lambda: _tell(notifier, _summary(app)))
            startgc.serving()  # what the start made is out of every later collection
            await _serve(app, notifier, signals)
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
            ssl_context=_ssl_context(settings),
        )
        try:
            await site.start()
        except OSError as e:
            raise _listen_problem(settings.http, e) from e
    except BaseException:
        await runner.cleanup()
        raise


def status_url(settings: Settings, runner: web.AppRunner) -> str:
    """Where a browser on this machine finds the status page (a wildcard address is
    reached on loopback; port 0 is the port the kernel chose)."""
    scheme = "https" if settings.http.tls_cert is not None else "http"
    host = settings.http.host
    port = next((a[1] for a in runner.addresses if isinstance(a, tuple)), settings.http.port)
    if host in ("", "0.0.0.0"):  # the wildcard named, not bound
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}/"


class _Signals:
    """SIGTERM/SIGINT set ``stop``, SIGHUP sets ``hup``; from the listener on, so a stop
    while the bundles load ends the start at once (what has not loaded is not waited for).
    The handlers stay for the whole drain: a second SIGTERM must not kill the drain."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.stop, self.hup = asyncio.Event(), asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.hup.set)


async def _opened(app: web.Application, stop: asyncio.Event) -> bool:
    """Wait for stage two; False when a stop came first. Raises what made stage two fail."""
    done = app[OPENING].done
    assert done is not None  # set by the runner's setup  # noqa: S101
    stopped = asyncio.ensure_future(stop.wait())
    waiters: list[asyncio.Future[object]] = [done, stopped]  # type: ignore[list-item]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if done.done() and not done.cancelled():
        done.result()  # raises what failed (a ConfigError exits 2, as before the listener)
        return not stop.is_set()
    return False


def _host_port(address: object) -> str:
    """``127.0.0.1:8080`` / ``[::1]:8080`` for a socket address (a path for a Unix one)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), address[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(address)


async def _serve(app: web.Application, notifier: Notifier, signals: _Signals) -> None:
    stop, hup = signals.stop, signals.hup
    async with notifier.watchdog():
        while not stop.is_set():
            waiters = [asyncio.create_task(e.wait()) for e in (stop, hup)]
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()
            if hup.is_set() and not stop.is_set():
                hup.clear()
                notifier.reloading()
                await reload(app)
                notifier.ready(_summary(app))


def _keep_restart_only(old: Settings, new: Settings) -> Settings:
    """``new``, except the settings that need a restart keep their running value."""
    kept: dict[str, object] = {}
    for section in _RESTART_ONLY:
        if getattr(old, section) != getattr(new, section):
            log.warning("%s changed: takes effect after a restart", section)
        kept[section] = getattr(old, section)
    for section, names in _FIELDS_AT_START.items():
        running = {k: getattr(getattr(old, section), k) for k in names}
        for key, value in running.items():
            if getattr(getattr(new, section), key) != value:
                log.warning("%s.%s changed: takes effect after a restart", section, key)
        kept[section] = replace(getattr(new, section), **running)
    return replace(new, **kept)


async def reload(app: web.Application) -> bool:
    """Apply the config file again (see the module docstring); False when it was refused."""
    live = app[LIVE]
    old = live.settings
    try:
        new = _keep_restart_only(old, load_settings(live.config_path))
        trust = load_trust(new)
    except (ConfigError, SigningError) as e:
        log.error("reload refused, keeping the running configuration: %s", e)  # noqa: TRY400
        return False
    live.settings = new
    setup_logging(new.log.format, new.log.level)
    service = app[SERVICE]
    if isinstance(service, InferenceService):
        service.update_limits(new.limits)
    app[DEPS].engine.apply_ceilings(ceilings(new))  # memory_mb, max_output_bytes, ... at once
    app[VARIABLES].reconfigure(app[REGISTRY].table, new.variables)
    try:
        app[REGISTRY].expiry = new.trust.expiry
        unloaded = await app[REGISTRY].apply_trust(trust)
        app[WATCHER].trust_seen()
        # Files refused before may be what the new trust accepts (`trust add` + SIGHUP).
        await app[WATCHER].rescan(retry_refused=True)
        await app[FLEET].reread()  # the desired file; a document refused before may pass
    except DaemonError:
        log.exception("reload: bundle rescan failed")
    else:
        log.info("reloaded", extra={"unloaded_by_trust": unloaded})
    return True

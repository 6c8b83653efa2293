"""What every way of running the daemon shares: signals, the wait for stage two, the
serving loop, SIGHUP's reload and where threads run (`daemon`, `worker`, `supervised`)."""

from __future__ import annotations

import asyncio
import errno
import logging
import shutil
import signal
import socket
import ssl
from collections.abc import Callable

from aiohttp import web

from wasmgate.runtime.compose.app import ceilings
from wasmgate.runtime.compose.app_keys import DEPS, OPENING, WATCHER
from wasmgate.runtime.compose.app_service import load_trust
from wasmgate.runtime.errors import ConfigError, DaemonError
from wasmgate.runtime.http.keys import FLEET, LIVE, REGISTRY, SERVICE
from wasmgate.runtime.http.variables import VARIABLES
from wasmgate.runtime.ops.config import HttpSettings, LimitSettings, Settings, load_settings
from wasmgate.runtime.ops.cpus import CpuPlan
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
"""Fields read only at start (`wasmgate.runtime.compose.app`) of sections that otherwise
apply at once."""


class ListenError(DaemonError):
    """The HTTP listener cannot bind its address (in use, not permitted, not local)."""


def listen_problem(http: HttpSettings, err: OSError) -> ListenError:
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
        raise listen_problem(http, e) from e


def bind_public(settings: Settings, count: int) -> list[socket.socket]:
    """``count`` sockets on the gateway's HTTP address, bound with ``SO_REUSEPORT`` and
    listening, one per worker: the kernel spreads connections over them by a hash of the
    peer's address and port. One socket shared by all workers was measured to give nearly
    every connection to whichever worker woke first (a wrk run at 16 connections: 537 vs
    50 CPU ticks). The supervisor keeps them open, so the connections hashed to a worker
    that is restarting wait in its socket's backlog for the new one instead of being
    refused. The first address ``http.host`` resolves to; port 0 is chosen once."""
    http = settings.http
    sockets: list[socket.socket] = []
    try:
        family, kind, proto, _name, addr = socket.getaddrinfo(
            http.host or None, http.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(addr)
            addr = sock.getsockname()  # port 0: the others take the port the first got
            sock.listen(socket.SOMAXCONN)
            sock.set_inheritable(True)
    except OSError as e:
        for sock in sockets:
            sock.close()
        raise listen_problem(http, e) from e
    return sockets


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    cert, key = settings.http.tls_cert, settings.http.tls_key
    if cert is None or key is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


def place_threads(pin: bool) -> CpuPlan:
    """Python threads on one CPU, before the app starts any (`wasmgate.runtime.ops.cpus`)."""
    cpus = CpuPlan.current()
    cpus = cpus.one_cpu() if pin else cpus
    if cpus.pinned:
        cpus.apply()
        log.info(
            "python threads on CPU %s of %s (one interpreter runs on one CPU at a time; "
            "inference threads use all of them)",
            cpu_list(cpus.python),
            cpu_list(cpus.allowed),
        )
    return cpus


def cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def summary(app: web.Application) -> str:
    service = app[SERVICE]
    infos = service.list_models()
    models = sum(1 for i in infos if i.kind == "model")
    return f"serving {len(service.adapter_names())} adapters, {models} models"


def tell(notifier: Notifier, status: str) -> None:
    notifier.status(status)  # a lost datagram is not worth more than systemd's next one


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


class Signals:
    """SIGTERM/SIGINT set ``stop``, SIGHUP sets ``hup``; from the listener on, so a stop
    while the bundles load ends the start at once (what has not loaded is not waited for).
    The handlers stay for the whole drain: a second SIGTERM must not kill the drain."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.stop, self.hup = asyncio.Event(), asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.hup.set)


async def opened(app: web.Application, stop: asyncio.Event) -> bool:
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


def host_port(address: object) -> str:
    """``127.0.0.1:8080`` / ``[::1]:8080`` for a socket address (a path for a Unix one)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), address[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(address)


async def serve(
    app: web.Application,
    notifier: Notifier,
    signals: Signals,
    after_reload: Callable[[], None] | None = None,
    share: Share | None = None,
    *,
    worker: bool = False,
) -> None:
    """Serve until ``signals.stop``; SIGHUP reloads (then ``after_reload``: the supervisor
    passes it on to its workers)."""
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
                await reload(app, share, worker=worker)
                if after_reload is not None:
                    after_reload()
                notifier.ready(summary(app))


def keep_restart_only(old: Settings, new: Settings) -> Settings:
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


Share = Callable[[LimitSettings], LimitSettings]
"""A worker's part of the gateway's caps (`wasmgate.runtime.supervisor.pool.shares`)."""


async def reload(app: web.Application, share: Share | None = None, *, worker: bool = False) -> bool:
    """Apply the config file again (`wasmgate.runtime.compose.daemon`'s docstring says what);
    False when it was refused. ``share``: this process's part of the gateway's caps (with
    workers). A ``worker`` applies the settings of its own (log, limits, ceilings, variables)
    and leaves trust, the bundle folder and the fleet document to the supervisor, whose
    changes reach it as a replacement."""
    live = app[LIVE]
    old = live.settings
    try:
        new = keep_restart_only(old, load_settings(live.config_path))
        if share is not None:
            new = replace(new, limits=share(new.limits))
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
    if worker:
        log.info("reloaded")
        return True
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


async def end_unused_worker_sessions(settings: Settings, workers: int) -> None:
    """End the broker sessions of workers this start no longer has (`runtime.mqtt.sessions`:
    a removed worker's persistent session would take a share of every request)."""
    if settings.mqtt.host is None:
        return
    from wasmgate.runtime.mqtt.sessions import end_unused_sessions  # noqa: PLC0415 - paho

    state_dir = settings.paths.resolved("state_dir")
    await asyncio.to_thread(end_unused_sessions, settings.mqtt, state_dir, workers)

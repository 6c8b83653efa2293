"""The daemon's lifecycle: build the app, serve until a signal, drain, stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl

from aiohttp import web

from wasmgate.runtime.app import build_app
from wasmgate.runtime.config import Settings
from wasmgate.runtime.logs import setup_logging

log = logging.getLogger("wasmgate.daemon")


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    cert, key = settings.http.tls_cert, settings.http.tls_key
    if cert is None or key is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def run_daemon(settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT, then drain in-flight requests for at most ``drain_s``."""
    setup_logging(settings.log.format, settings.log.level)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = build_app(settings)
    runner = web.AppRunner(app, shutdown_timeout=settings.drain_s, access_log=None)
    await runner.setup()
    site = web.TCPSite(
        runner, settings.http.host, settings.http.port, ssl_context=_ssl_context(settings)
    )
    await site.start()
    log.info("listening", extra={"addresses": [str(a) for a in runner.addresses]})
    try:
        await stop.wait()
    finally:
        log.info("stopping", extra={"drain_s": settings.drain_s})
        await runner.cleanup()
        log.info("stopped")
    return 0

"""systemd integration without dependencies: sd_notify(3) over ``NOTIFY_SOCKET``.

- ``READY=1`` is sent once bundles are loaded and the listeners are up, ``STOPPING=1`` when
  a drain starts, ``STATUS=...`` lines say what the daemon is doing.
- ``WATCHDOG=1`` is sent from the event loop (a task, not a thread), every half of
  ``WATCHDOG_USEC``: a wedged loop stops the pings and systemd restarts the unit.
- Outside systemd (no ``NOTIFY_SOCKET``) every call is a cheap no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Mapping

from wasmgate.runtime.ops.tasks import background

log = logging.getLogger("wasmgate.systemd")


def _socket_address(raw: str) -> str | None:
    if raw.startswith("@"):
        return "\0" + raw[1:]  # Linux abstract namespace
    if raw.startswith("/"):
        return raw
    return None  # vsock and other address families: unsupported


class Notifier:
    """Sends sd_notify datagrams; built from the environment systemd gives the service."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = _socket_address(raw) if raw else None
        if raw and self._address is None:
            log.warning("unsupported NOTIFY_SOCKET address, notifications off", extra={"addr": raw})
        self._watchdog_s = _watchdog_interval(env)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_s(self) -> float | None:
        """The watchdog timeout systemd set for us (seconds), or None when it is off."""
        return self._watchdog_s

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; False when not under systemd or on error."""
        if self._address is None:
            return False
        data = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self._address)
                s.sendall(data)
        except OSError as e:
            log.warning("sd_notify failed", extra={"error": str(e)})
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def stopping(self, status: str = "draining") -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")

    def reloading(self) -> bool:
        return self.notify("RELOADING=1", "STATUS=reloading")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    @contextlib.asynccontextmanager
    async def watchdog(self) -> AsyncIterator[None]:
        """Ping ``WATCHDOG=1`` from the event loop at half the timeout while inside."""
        if self._watchdog_s is None or self._address is None:
            yield
            return
        async with background(self._ping_forever(self._watchdog_s / 2), "sd-watchdog"):
            yield

    async def _ping_forever(self, interval: float) -> None:
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(interval)


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None  # no watchdog, or it is meant for another process
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring malformed WATCHDOG_USEC", extra={"value": usec})
        return None
    return value / 1_000_000 if value > 0 else None

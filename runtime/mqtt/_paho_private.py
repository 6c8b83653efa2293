"""Every use of paho-mqtt's private API, fenced in one module.

The bridge drives paho from the asyncio loop (``client.py``), and paho has no public way for
an external loop to drop a socket without a DISCONNECT round trip: ``Client._sock_close``
does exactly that (and calls ``on_socket_close``, so the loop lets go of the descriptor).
`BufferedClient` overrides ``Client._sock_recv`` (paho reads a packet with one ``recv`` per
header byte, then one for the rest: three or more system calls per packet) with reads of
up to `READ_BYTES` served from a buffer. `close_threaded` ends a ``loop_start()`` client for
good: paho closes the socket pair that
``loop_start`` opened only in ``Client.__del__`` (paho issue #627), so a client in a reference
cycle (its callbacks are bound methods of its owner) leaks two descriptors until the garbage
collector runs, with a ResourceWarning each. The private name is known in `SUPPORTED` (the
pin in ``pyproject.toml``); `check_paho` runs when an MQTT client is built and refuses any
other paho-mqtt with one clear error.
"""

from __future__ import annotations

from importlib.metadata import version

import paho.mqtt.client as paho

from wasmgate.runtime.errors import ConfigError

__all__ = ["SUPPORTED", "BufferedClient", "check_paho", "close_threaded", "sock_close"]

SUPPORTED = "paho-mqtt>=2.2,<2.3"
_MINORS = {(2, 2)}


def check_paho(installed: str | None = None) -> None:
    """Refuse a paho-mqtt outside `SUPPORTED` (or one without ``Client._sock_close`` and
    ``Client._sock_recv``)."""
    found = installed or version("paho-mqtt")
    parts = found.split(".")
    minor = tuple(int(p) for p in parts[:2] if p.isdigit())
    private = ("_sock_close", "_sock_recv")
    if minor not in _MINORS or not all(callable(getattr(paho.Client, n, None)) for n in private):
        raise ConfigError(
            f"paho-mqtt {found} is not supported: the MQTT bridge closes and reads sockets "
            f"through paho internals known in {SUPPORTED}; install a version in that range"
        )


READ_BYTES = 65536


class BufferedClient(paho.Client):
    """A paho client that reads its socket in large chunks (see the module doc).

    Bytes already read wake no selector: whoever drives ``loop_read`` calls it again while
    `buffered` is true. The buffer belongs to one socket: a new connection starts empty."""

    _rbuf = b""
    _rpos = 0
    _rsock: object = None

    def buffered(self) -> bool:
        """Bytes read from the current socket that paho has not consumed yet."""
        return self._rpos < len(self._rbuf) and self._rsock is self._sock

    def _sock_recv(self, bufsize: int) -> bytes:
        if not self.buffered():
            data = super()._sock_recv(READ_BYTES)  # BlockingIOError: nothing there
            self._rbuf, self._rpos, self._rsock = data, 0, self._sock
            if not data:
                return data  # the peer closed the connection
        end = self._rpos + bufsize
        chunk = self._rbuf[self._rpos : end]
        self._rpos = end
        return chunk


def sock_close(client: paho.Client) -> None:
    """Close the client's socket now (no DISCONNECT); paho calls ``on_socket_close`` first."""
    client._sock_close()  # noqa: SLF001 - the fence: no public close for external loops


def close_threaded(client: paho.Client) -> None:
    """Disconnect a ``loop_start()`` client, stop its thread and close every socket now.

    ``reinitialise()`` (public) is the one call that closes the socket pair; it also resets
    the client, which is what a closed client should be."""
    client.disconnect()
    client.loop_stop()
    client.reinitialise()

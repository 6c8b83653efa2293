"""Every use of paho-mqtt's private API, fenced in one module.

The bridge drives paho from the asyncio loop (``client.py``), and paho has no public way for
an external loop to drop a socket without a DISCONNECT round trip: ``Client._sock_close``
does exactly that (and calls ``on_socket_close``, so the loop lets go of the descriptor).
`close_threaded` ends a ``loop_start()`` client for good: paho closes the socket pair that
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

__all__ = ["SUPPORTED", "check_paho", "close_threaded", "sock_close"]

SUPPORTED = "paho-mqtt>=2.2,<2.3"
_MINORS = {(2, 2)}


def check_paho(installed: str | None = None) -> None:
    """Refuse a paho-mqtt outside `SUPPORTED` (or one without ``Client._sock_close``)."""
    found = installed or version("paho-mqtt")
    parts = found.split(".")
    minor = tuple(int(p) for p in parts[:2] if p.isdigit())
    if minor not in _MINORS or not callable(getattr(paho.Client, "_sock_close", None)):
        raise ConfigError(
            f"paho-mqtt {found} is not supported: the MQTT bridge closes sockets through a "
            f"paho internal known in {SUPPORTED}; install a version in that range"
        )


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

"""A stand-in for systemd's notification socket: a real AF_UNIX datagram socket.

Every datagram is recorded with its arrival time by a receiver thread, so tests can check
what the daemon announced and when (READY, WATCHDOG cadence, RELOADING, STOPPING).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Datagram:
    at: float
    text: str

    @property
    def fields(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.text.splitlines() if "=" in line)


class NotifySocket:
    """Bound to ``path`` (or an abstract name when ``abstract``); ``address`` is for the env."""

    def __init__(self, path: Path | None = None, abstract: str | None = None) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract is not None:
            self._sock.bind("\0" + abstract)
            self.address = "@" + abstract
        else:
            assert path is not None
            self._sock.bind(str(path))
            self.address = str(path)
        self._sock.settimeout(0.1)
        self.received: list[Datagram] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.received.append(Datagram(time.monotonic(), data.decode()))

    def messages(self) -> list[Datagram]:
        with self._lock:
            return list(self.received)

    def with_field(self, key: str, value: str | None = None) -> list[Datagram]:
        return [d for d in self.messages() if key in d.fields and value in (None, d.fields[key])]

    def wait_for(self, key: str, value: str | None = None, timeout: float = 30.0) -> Datagram:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = self.with_field(key, value)
            if found:
                return found[-1]
            time.sleep(0.02)
        raise TimeoutError(f"no {key}={value} within {timeout}s; got {self.messages()}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()

"""One gateway's shared model weights (`onnx_weights`), handed to its workers by key.

The supervisor loads every bundle before its workers do (at the start and at every change
of what serves), so it is the one process that splits a model (`WeightServer`); it keeps
each model's two sealed memfds while a model of its own uses them and sends them, over a
Unix socket in its private run folder, to any worker that asks for them by key
(``SCM_RIGHTS``: the descriptors themselves, `socket.send_fds`). A worker (`WeightClient`)
checks the seals (`SealedFile.adopt`) and maps the weights; a key the supervisor does not
hold (it released the model since) is a miss, and the worker loads a copy of its own.

Why descriptors and not names: a memfd has no name another process can open (``/dev/shm``
files cannot be sealed), and ``/proc/<supervisor>/fd/N`` is closed to a worker (Landlock
and its seccomp filter keep it out of the supervisor's ``/proc``), so the supervisor hands
over the very files it sealed. The key (the model's SHA-256 with every option that shapes
its optimized graph) says which; the seals, not a second check, keep the bytes the ones
the supervisor checked. A worker gains nothing it could not load itself: read-only views
of weights of the bundles the gateway serves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
from pathlib import Path

import msgspec

from wasmgate._compat import Self
from wasmgate.runtime.backends.onnx_weights import Entry, SharedWeights
from wasmgate.sealed import SealedFile

__all__ = ["WeightClient", "WeightServer", "WeightShare"]

log = logging.getLogger("wasmgate.runtime.backends.weights")

_KEY_MAX = 256
_HEADER = struct.Struct("!I")
_TIMEOUT_S = 10.0
_INDEX = msgspec.json.Decoder(list[Entry])


class WeightShare:
    """What a backend asks: `lookup` a key; a process that `makes` splits on a miss and
    `publish` es; `release` when a model that used a key is closed."""

    makes = False

    def lookup(self, key: str) -> SharedWeights | None:
        raise NotImplementedError

    def publish(self, key: str, shared: SharedWeights) -> None:
        """Keep ``shared``'s files for the other processes (the caller still closes its own)."""

    def release(self, key: str) -> None:
        """One model of this process that used ``key`` was closed."""


def _dup(shared: SharedWeights) -> SharedWeights:
    graph, weights = shared.graph.fileno, shared.weights.fileno
    if graph is None or weights is None:
        raise OSError("shared weights are not in memfds")
    return SharedWeights(SealedFile.adopt(os.dup(graph)), SealedFile.adopt(os.dup(weights)),
                         shared.index)  # fmt: skip


class WeightServer(WeightShare):
    """The supervisor's side: the published weights, counted by the models that use them,
    and the socket its workers ask on (served by a thread of its own)."""

    makes = True

    def __init__(self, path: Path) -> None:
        self._held: dict[str, tuple[SharedWeights, int]] = {}
        self._lock = threading.Lock()
        path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        self._thread = threading.Thread(target=self._serve, name="weights", daemon=True)
        self._thread.start()

    def lookup(self, key: str) -> SharedWeights | None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held[key] = (held[0], held[1] + 1)
            return _dup(held[0])

    def publish(self, key: str, shared: SharedWeights) -> None:
        with self._lock:
            old = self._held.get(key)
            if old is not None:  # two loads of one model raced: keep the first's files
                self._held[key] = (old[0], old[1] + 1)
                return
            self._held[key] = (_dup(shared), 1)

    def release(self, key: str) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return
            if held[1] > 1:
                self._held[key] = (held[0], held[1] - 1)
                return
            del self._held[key]
        held[0].close()

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed: the server stops
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(_TIMEOUT_S)
                self._answer(conn, _read_key(conn))

    def _answer(self, conn: socket.socket, key: str) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                conn.sendall(_HEADER.pack(0))
                return
            shared = held[0]
            fds = [shared.graph.fileno, shared.weights.fileno]
            body = msgspec.json.encode(shared.index)
            message = _HEADER.pack(len(body)) + body
            sent = socket.send_fds(conn, [message], [fd for fd in fds if fd is not None])
        conn.sendall(message[sent:])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=_TIMEOUT_S)
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for shared, _ in held:
            shared.close()


def _read_key(conn: socket.socket) -> str:
    """The key a worker sent, up to its end of writing (at most `_KEY_MAX` bytes)."""
    data = b""
    while len(data) < _KEY_MAX and (chunk := conn.recv(_KEY_MAX - len(data))):
        data += chunk
    return data.decode(errors="replace")


class WeightClient(WeightShare):
    """A worker's side: asks the supervisor's socket, one connection per model load."""

    def __init__(self, path: Path) -> None:
        self._path = str(path)

    def lookup(self, key: str) -> SharedWeights | None:
        try:
            return self._ask(key)
        except OSError as e:
            log.warning("shared weights unavailable, loading a copy: %s", e)
            return None

    def _ask(self, key: str) -> SharedWeights | None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(_TIMEOUT_S)
            conn.connect(self._path)
            conn.sendall(key.encode()[:_KEY_MAX])
            conn.shutdown(socket.SHUT_WR)  # the key is whole
            data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 2)
            files = [SealedFile.adopt(fd) for fd in fds]  # each checked; closes a bad one
            try:
                return _received(conn, data, files)
            except BaseException:
                for f in files:
                    f.close()
                raise


def _received(conn: socket.socket, data: bytes, files: list[SealedFile]) -> SharedWeights | None:
    while len(data) < _HEADER.size:
        data += _more(conn)
    (length,) = _HEADER.unpack_from(data)
    if length == 0 and not files:
        return None
    while len(data) < _HEADER.size + length:
        data += _more(conn)
    if len(files) != 2:
        raise OSError(f"expected 2 sealed files, got {len(files)}")
    index = _INDEX.decode(data[_HEADER.size : _HEADER.size + length])
    return SharedWeights(files[0], files[1], index)


def _more(conn: socket.socket) -> bytes:
    chunk = conn.recv(1 << 16)
    if not chunk:
        raise OSError("supervisor closed the weights socket early")
    return chunk

"""Adapter state: the key-value interface the sandbox calls and its ``wasmgate.state_*`` imports.

The sandbox defines the contract; the runtime owns the store (a SQLite file in the state
dir) and hands each granted adapter an :class:`AdapterState` for its own keys only.

Import set "state" v1 (optional: Guest ABI v1 adapters that do not import it are unchanged;
an adapter that imports it loads on any daemon that knows the set, granted or not):

    state_get(key*, key_len, buf*, cap, written*) -> errno   value into buf, its size into
                                                             *written (also when too small)
    state_set(key*, key_len, val*, val_len, ttl_ms) -> errno ttl_ms 0 = kept until deleted
    state_delete(key*, key_len) -> errno

Invariants:
- Every call is one atomic store operation; a refused ``state_set`` changes nothing.
- Keys are 1..``MAX_KEY_BYTES`` bytes; a longer (or empty) key is ``KEY_TOO_LONG`` before any
  store access, and a value longer than the grant's ``max_bytes`` is refused before it is
  copied out of guest memory.
- Without a grant every call answers ``NOT_GRANTED``; the host never raises into wasm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wasmgate.sandbox.memory import GuestMemory

__all__ = [
    "MAX_KEY_BYTES",
    "STATE_API_VERSION",
    "AdapterState",
    "StateErrno",
    "StateError",
    "state_delete",
    "state_get",
    "state_set",
]

STATE_API_VERSION = 1
MAX_KEY_BYTES = 256
_MS = 1000.0


class StateErrno:
    """What a ``state_*`` call returns to the guest (``WG_STATE_*`` in ``wasmgate.h``)."""

    OK = 0
    NOT_FOUND = 1
    BUFFER_TOO_SMALL = 2
    NOT_GRANTED = 3
    KEY_TOO_LONG = 4
    VALUE_TOO_BIG = 5
    """The value alone, or with what is stored, exceeds the grant's ``max_bytes``."""
    TOO_MANY_KEYS = 6
    FAILED = 7
    """The store failed (disk full, I/O error): nothing was written."""


class StateError(Exception):
    """A refused state operation: ``errno`` goes to the guest, the message to the logs."""

    def __init__(self, errno: int, reason: str) -> None:
        """``errno`` is a :class:`StateErrno` value."""
        super().__init__(reason)
        self.errno = errno


class AdapterState(Protocol):
    """One adapter's keys. Implementations are thread-safe and enforce the grant."""

    @property
    def max_bytes(self) -> int:
        """The grant's byte budget (keys plus values of every live entry)."""
        ...

    def get(self, key: bytes) -> bytes | None:
        """The live value of ``key``, None if absent or expired."""
        ...

    def set(self, key: bytes, value: bytes, ttl_s: float | None) -> None:
        """Store ``key`` (expiring after ``ttl_s`` seconds if given); raises StateError."""
        ...

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; False if it was absent (or expired)."""
        ...


Log = Callable[[str], None]


def _key(
    state: AdapterState | None, mem: GuestMemory, ptr: int, length: int
) -> tuple[AdapterState, bytes]:
    if state is None:
        raise StateError(StateErrno.NOT_GRANTED, "the manifest grants no [state]")
    length &= 0xFFFF_FFFF
    if not 0 < length <= MAX_KEY_BYTES:
        raise StateError(StateErrno.KEY_TOO_LONG, f"key of {length} bytes (1..{MAX_KEY_BYTES})")
    return state, mem.read(ptr, length)


def _guarded(name: str, log: Log, call: Callable[[], int]) -> int:
    try:
        return call()
    except StateError as e:
        if e.errno != StateErrno.NOT_FOUND:
            log(f"{name}: refused ({e.errno}): {e}")
        return e.errno


def state_get(  # noqa: PLR0917 - wasm ABI argument order
    state: AdapterState | None,
    log: Log,
    mem: GuestMemory,
    key: int,
    klen: int,
    buf: int,
    cap: int,
    out: int,
) -> int:
    """``wasmgate.state_get``: copy the value into ``buf`` and its size into ``*out``."""

    def call() -> int:
        mem.check(out, 4)
        store, name = _key(state, mem, key, klen)
        value = store.get(name)
        if value is None:
            return StateErrno.NOT_FOUND
        mem.put_u32(out, len(value))
        if len(value) > cap & 0xFFFF_FFFF:
            return StateErrno.BUFFER_TOO_SMALL
        mem.write(buf, value)
        return StateErrno.OK

    return _guarded("state_get", log, call)


def state_set(  # noqa: PLR0917 - wasm ABI argument order
    state: AdapterState | None,
    log: Log,
    mem: GuestMemory,
    key: int,
    klen: int,
    val: int,
    vlen: int,
    ttl_ms: int,
) -> int:
    """``wasmgate.state_set``: store the value, with a TTL unless ``ttl_ms`` is 0."""

    def call() -> int:
        store, name = _key(state, mem, key, klen)
        length = vlen & 0xFFFF_FFFF
        if length > store.max_bytes:  # refuse before copying a huge value out of the guest
            raise StateError(
                StateErrno.VALUE_TOO_BIG, f"value of {length} bytes (max_bytes {store.max_bytes})"
            )
        ttl = ttl_ms & 0xFFFF_FFFF
        store.set(name, mem.read(val, length), ttl / _MS if ttl else None)
        return StateErrno.OK

    return _guarded("state_set", log, call)


def state_delete(
    state: AdapterState | None, log: Log, mem: GuestMemory, key: int, klen: int
) -> int:
    """``wasmgate.state_delete``: OK, or NOT_FOUND if there was no live entry."""

    def call() -> int:
        store, name = _key(state, mem, key, klen)
        return StateErrno.OK if store.delete(name) else StateErrno.NOT_FOUND

    return _guarded("state_delete", log, call)

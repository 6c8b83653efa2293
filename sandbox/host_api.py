"""The ``wasmgate`` import module of Guest ABI v1 and the per-request state it fills.

Invariants:
- Every buffer a guest passes is bounds-checked; an out-of-bounds pointer is recorded as a
  ``violation`` (the request then fails with ``GuestTrap(cause="oob")``) and the call
  returns an error code — host functions never raise into wasm.
- Output, events, log lines and the fallback reason are capped by ``GuestLimits``; a refused
  ``set_output`` returns 1 and is remembered, so a guest that ends on a refused output
  fails with ``GuestOutputTooLarge``.
- Metadata is read-only and comes only from the mapping the caller passed to ``run``.
- ``state_*`` (the optional "state" import set, ``wasmgate.sandbox.state``) reach only the
  ``AdapterState`` the caller passed to ``run`` (None: not granted).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import wasmtime

from wasmgate.sandbox.limits import GuestLimits
from wasmgate.sandbox.memory import GuestMemory, GuestPointerError, MissingMemoryError
from wasmgate.sandbox.rawcall import CallbackKeeper, caller_memory, define_raw
from wasmgate.sandbox.state import AdapterState, state_delete, state_get, state_set

__all__ = [
    "HOST_FUNCTIONS",
    "HOST_MODULE",
    "HOST_STATE_FUNCTIONS",
    "RequestState",
    "define_host_api",
]

HOST_MODULE = "wasmgate"
_LEVELS = ("debug", "info", "warn", "error")
_MAX_REASON = 1024
_MAX_KEY = 256


@dataclass
class RequestState:
    """What one request's guest produced besides its status, plus its deadline."""

    meta: Mapping[str, str]
    limits: GuestLimits
    deadline: float = field(default=0.0)
    output: bytes = b""
    output_refused: bool = False
    fallback_reason: str | None = None
    events: list[bytes] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    log_bytes: int = 0
    violation: str | None = None
    slept_past_deadline: bool = False
    pending: dict[str, bytes] = field(default_factory=dict)  # partial stdout/stderr lines
    state: AdapterState | None = None

    def __post_init__(self) -> None:
        """Start the wall-clock deadline now unless one was given."""
        if not self.deadline:
            self.deadline = time.monotonic() + self.limits.deadline_s

    def log(self, line: str) -> None:
        """Append a log line unless the request's log budget is spent (then one marker)."""
        cap = self.limits.max_log_bytes
        if self.log_bytes >= cap:
            return
        encoded = len(line.encode())
        if self.log_bytes + encoded > cap:
            line = line[: max(0, cap - self.log_bytes)] + " [log truncated]"
        self.log_bytes += encoded
        self.logs.append(line)

    def sink(self, stream: str) -> Callable[[bytes], None]:
        """A WASI stdout/stderr callback writing ``stream: line`` entries into the log."""

        def write(data: bytes) -> None:
            if self.log_bytes >= self.limits.max_log_bytes:
                return  # budget spent: drop, and never buffer without bound
            *lines, rest = (self.pending.get(stream, b"") + data).split(b"\n")
            for line in lines:
                self.log(f"{stream}: {line.decode(errors='replace')}")
            self.pending[stream] = rest[: self.limits.max_log_bytes]

        return write

    def flush(self) -> None:
        """Log what is left of unterminated stdout/stderr lines (end of the request)."""
        if not self.pending:
            return  # the usual case: the guest wrote nothing, or only whole lines
        for stream, rest in sorted(self.pending.items()):
            if rest:
                self.log(f"{stream}: {rest.decode(errors='replace')}")
        self.pending.clear()

    def violate(self, what: str) -> None:
        """Record the first ABI violation (the request will fail with ``cause='oob'``)."""
        if self.violation is None:
            self.violation = what


def _set_output(req: RequestState, mem: GuestMemory, ptr: int, length: int) -> int:
    length &= 0xFFFF_FFFF
    if length > req.limits.max_output_bytes:
        req.output_refused = True
        req.log(
            f"set_output: {length} bytes refused "
            f"(limits.max_output_bytes: {req.limits.max_output_bytes})"
        )
        return 1
    req.output = mem.read(ptr, length)
    req.output_refused = False
    return 0


def _log(req: RequestState, mem: GuestMemory, level: int, ptr: int, length: int) -> None:
    text = mem.read(ptr, min(length & 0xFFFF_FFFF, req.limits.max_log_bytes)).decode(
        errors="replace"
    )
    name = _LEVELS[level] if 0 <= level < len(_LEVELS) else "info"
    req.log(f"{name}: {text}")


def _request_fallback(req: RequestState, mem: GuestMemory, ptr: int, length: int) -> None:
    reason = mem.read(ptr, min(length & 0xFFFF_FFFF, _MAX_REASON)).decode(errors="replace")
    req.fallback_reason = reason or "adapter asked for fallback"


def _meta(  # noqa: PLR0917 - wasm ABI argument order
    req: RequestState, mem: GuestMemory, key: int, klen: int, buf: int, cap: int, out: int
) -> int:
    mem.check(out, 4)
    name = mem.read(key, min(klen & 0xFFFF_FFFF, _MAX_KEY)).decode(errors="replace")
    value = req.meta.get(name)
    if value is None:
        return 1
    data = value.encode()
    mem.put_u32(out, len(data))
    if len(data) > cap & 0xFFFF_FFFF:
        return 2
    mem.write(buf, data)
    return 0


def _emit_event(req: RequestState, mem: GuestMemory, ptr: int, length: int) -> int:
    length &= 0xFFFF_FFFF
    if len(req.events) >= req.limits.max_events or length > req.limits.max_output_bytes:
        req.log(f"emit_event: refused ({length} bytes, {len(req.events)} events so far)")
        return 1
    req.events.append(mem.read(ptr, length))
    return 0


_Impl = Callable[..., int | None]
HOST_FUNCTIONS: dict[str, tuple[int, bool, _Impl]] = {
    "set_output": (2, True, _set_output),
    "log": (3, False, _log),
    "request_fallback": (2, False, _request_fallback),
    "meta": (5, True, _meta),
    "emit_event": (2, True, _emit_event),
}
HOST_STATE_FUNCTIONS: dict[str, tuple[int, bool, _Impl]] = {
    "state_get": (5, True, lambda req, mem, *a: state_get(req.state, req.log, mem, *a)),
    "state_set": (5, True, lambda req, mem, *a: state_set(req.state, req.log, mem, *a)),
    "state_delete": (2, True, lambda req, mem, *a: state_delete(req.state, req.log, mem, *a)),
}
"""The optional "state" import set (``wasmgate.sandbox.state.STATE_API_VERSION``)."""


def define_host_api(
    linker: wasmtime.Linker, keeper: CallbackKeeper, current: Callable[[], RequestState]
) -> None:
    """Define the ``wasmgate`` functions; ``current()`` gives the calling thread's request."""
    for name, (arity, returns, impl) in (HOST_FUNCTIONS | HOST_STATE_FUNCTIONS).items():
        sig = (arity, 1 if returns else 0)
        define_raw(linker, keeper, HOST_MODULE, name, sig, _host(name, returns, impl, current))


def _host(
    name: str, returns: bool, impl: _Impl, current: Callable[[], RequestState]
) -> Callable[..., int | None]:
    def call(caller: Any, *args: int) -> int | None:
        try:
            req = current()
        except Exception:
            return 1 if returns else None  # no request bound to this thread: never raise
        try:
            result = impl(req, caller_memory(caller), *args)
        except (GuestPointerError, MissingMemoryError) as e:
            req.violate(f"wasmgate.{name}: {e}")
            result = 1
        except Exception as e:
            req.violate(f"wasmgate.{name}: host error {e!r}")
            result = 1
        return (result or 0) if returns else None

    return call

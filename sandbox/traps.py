"""Translate wasmtime's ``Trap`` / ``ExitTrap`` / ``WasmtimeError`` into sandbox errors, and
check what a finished request left behind (``check_outcome``).

Invariants:
- The cause is taken from ``trap_code`` (never from the message text) for traps; for
  instantiation errors (``WasmtimeError``) the limit that fired is named.
- A trap after the guest filled its memory up to the limit (``memory.grow`` returned -1,
  then the guest gave up) is reported as memory exhaustion, not as the symptom.
- The returned error carries the request's captured logs.
- A request that returned normally still fails if it passed the host a bad pointer, ran past
  its deadline (also inside a host call), ended on a refused output or returned an unknown
  status, in that order of precedence.
"""

from __future__ import annotations

import time

import wasmtime

from wasmgate.sandbox.errors import (
    GuestDeadlineExceeded,
    GuestOutputTooLarge,
    GuestResourceExhausted,
    GuestTrap,
)
from wasmgate.sandbox.host_api import RequestState
from wasmgate.sandbox.limits import GuestLimits

__all__ = ["check_outcome", "translate"]

_T = wasmtime.TrapCode
_CAUSES = {
    _T.STACK_OVERFLOW: ("stack", "call stack exhausted (recursion too deep)"),
    _T.UNREACHABLE: ("unreachable", "executed `unreachable`"),
    _T.MEMORY_OUT_OF_BOUNDS: ("oob", "out-of-bounds memory access"),
    _T.TABLE_OUT_OF_BOUNDS: ("oob", "out-of-bounds table access"),
    _T.HEAP_MISALIGNED: ("oob", "misaligned atomic access"),
    _T.INDIRECT_CALL_TO_NULL: ("indirect_call", "indirect call to a null entry"),
    _T.BAD_SIGNATURE: ("indirect_call", "indirect call with a bad signature"),
    _T.INTEGER_OVERFLOW: ("integer_overflow", "integer overflow"),
    _T.INTEGER_DIVISION_BY_ZERO: ("integer_division_by_zero", "integer division by zero"),
    _T.BAD_CONVERSION_TO_INTEGER: ("bad_conversion", "invalid float to integer conversion"),
}


def translate(e: Exception, req: RequestState, *, near_memory_limit: bool) -> GuestTrap:
    """Map a wasmtime exception raised while running a guest to a ``GuestTrap``."""
    logs = req.logs
    if isinstance(e, wasmtime.ExitTrap):
        return GuestTrap(
            f"guest called proc_exit({e.code})", cause="exit", logs=logs, exit_code=e.code
        )
    if isinstance(e, wasmtime.Trap):
        return _trap(e, req, near_memory_limit=near_memory_limit)
    text = str(e)
    if "wasm backtrace" in text:  # a host (WASI) call refused the guest's arguments
        last = text.strip().splitlines()[-1].strip()
        return GuestTrap(f"a host call failed: {last[:300]}", cause="host", logs=logs)
    if "memory minimum size" in text or "memory limits" in text:
        return GuestResourceExhausted(
            f"initial memory exceeds the limit of {req.limits.memory_bytes} bytes "
            "(limits.memory_mb)",
            cause="memory",
            logs=logs,
        )
    if "table minimum size" in text or "table limits" in text:
        return GuestResourceExhausted(
            f"initial table exceeds the limit of {req.limits.table_elements} elements",
            cause="table",
            logs=logs,
        )
    if "resource limit exceeded" in text:
        return GuestResourceExhausted(
            f"resource limit exceeded: {_line(text)}", cause="instances", logs=logs
        )
    return GuestTrap(f"instantiation failed: {_line(text)}", cause="instantiate", logs=logs)


def _trap(e: wasmtime.Trap, req: RequestState, *, near_memory_limit: bool) -> GuestTrap:
    code = e.trap_code
    logs = req.logs
    if code == _T.INTERRUPT:
        how = " (it slept in poll_oneoff past the deadline)" if req.slept_past_deadline else ""
        return GuestDeadlineExceeded(
            f"adapter exceeded its deadline of {req.limits.deadline_s * 1000:.0f} ms "
            f"(limits.deadline_ms){how}",
            logs=logs,
        )
    if code == _T.OUT_OF_FUEL:
        return GuestResourceExhausted(
            f"adapter used up its fuel budget of {req.limits.fuel} (limits.fuel)",
            cause="fuel",
            logs=logs,
        )
    if code is None:  # a trap raised by host code
        cause, what = "host", _line(e.message)
    else:
        cause, what = _CAUSES.get(code, ("trap", _line(e.message)))
    if near_memory_limit and cause in ("unreachable", "oob"):
        return GuestResourceExhausted(
            f"adapter reached its memory limit of {req.limits.memory_bytes} bytes "
            f"(limits.memory_mb) and then trapped: {what}",
            cause="memory",
            logs=logs,
        )
    return GuestTrap(f"guest trapped: {what}", cause=cause, logs=logs)


def _line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if "Caused by:" in lines:
        return " ".join(lines[lines.index("Caused by:") + 1 :])[:300]
    return (lines[0] if lines else "unknown")[:300]


def check_outcome(req: RequestState, status: int, lim: GuestLimits) -> None:
    """Raise the error a request that returned ``status`` still deserves (see invariants)."""
    if req.violation is not None:
        raise GuestTrap(
            f"guest passed a bad pointer to the host: {req.violation}", cause="oob", logs=req.logs
        )
    if time.monotonic() > req.deadline:
        how = " (it slept in poll_oneoff past the deadline)" if req.slept_past_deadline else ""
        raise GuestDeadlineExceeded(
            f"adapter exceeded its deadline of {lim.deadline_s * 1000:.0f} ms "
            f"(limits.deadline_ms){how}",
            logs=req.logs,
        )
    if req.output_refused:
        raise GuestOutputTooLarge(
            f"adapter output exceeds the limit of {lim.max_output_bytes} bytes "
            "(limits.max_output_bytes)",
            logs=req.logs,
        )
    if status not in (0, 1, 2):
        raise GuestTrap(
            f"wasmgate_handle returned unknown status {status}", cause="abi", logs=req.logs
        )

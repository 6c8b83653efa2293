"""The sandbox's error hierarchy (no HTTP codes: the runtime maps these at its edge).

Invariants:
- Every failure caused by guest code is a ``GuestTrap`` (or subclass) carrying ``cause``
  (a short machine-readable word) and the ``logs`` captured before the failure.
- wasmtime's ``Trap``/``ExitTrap``/``WasmtimeError`` never escape the sandbox API; they are
  translated here with ``raise ... from e``.
- A failing request never leaves state behind: the instance that failed is discarded.
"""

from __future__ import annotations

__all__ = [
    "AdapterLoadError",
    "GuestDeadlineExceeded",
    "GuestOutputTooLarge",
    "GuestResourceExhausted",
    "GuestTrap",
    "SandboxError",
]


class SandboxError(Exception):
    """Base class of every error raised by ``wasmgate.sandbox``."""


class AdapterLoadError(SandboxError):
    """The module cannot become an adapter: malformed, too big, unknown import, bad exports."""


class GuestTrap(SandboxError):
    """The guest failed while running a request.

    ``cause`` is one of: ``unreachable``, ``stack``, ``memory``, ``table``, ``fuel``,
    ``deadline``, ``exit``, ``oob`` (out-of-bounds memory access or pointer handed to the
    host), ``abi`` (broken Guest ABI contract), ``output``, ``instantiate``, or a lower-case
    wasmtime trap code name. ``exit_code`` is set for ``exit``.
    """

    def __init__(
        self,
        message: str,
        *,
        cause: str,
        logs: list[str] | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Record the message, the cause word, the captured logs and any exit code."""
        super().__init__(message)
        self.cause = cause
        self.logs: list[str] = list(logs or [])
        self.exit_code = exit_code


class GuestDeadlineExceeded(GuestTrap):
    """The request ran past its wall-clock deadline (epoch interruption), ``cause='deadline'``."""

    def __init__(self, message: str, *, logs: list[str] | None = None) -> None:
        """A deadline failure (``cause='deadline'``)."""
        super().__init__(message, cause="deadline", logs=logs)


class GuestResourceExhausted(GuestTrap):
    """The guest hit a resource limit.

    ``cause`` is ``memory``, ``table``, ``fuel`` or ``instances``.
    """


class GuestOutputTooLarge(GuestTrap):
    """The guest tried to return more than ``max_output_bytes``, ``cause='output'``."""

    def __init__(self, message: str, *, logs: list[str] | None = None) -> None:
        """An output-limit failure (``cause='output'``)."""
        super().__init__(message, cause="output", logs=logs)

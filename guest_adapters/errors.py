"""Errors of the guest-adapter build step (one hierarchy; the CLI maps them to exit codes)."""

from __future__ import annotations


class GuestAdapterError(Exception):
    """Base of every error raised by ``wasmgate.guest_adapters``."""


class AdapterSourceError(GuestAdapterError):
    """The adapter source (file or directory) is missing or has no compilable file."""


class AdapterBuildError(GuestAdapterError):
    """The compiler failed; ``output`` holds its diagnostics."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output

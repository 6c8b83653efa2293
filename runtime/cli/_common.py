"""Shared CLI helpers: exit codes, the error type commands raise."""

from __future__ import annotations

import argparse

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

SubParsers = argparse._SubParsersAction


class CliError(Exception):
    """A command failed; the message is printed as one line and the process exits."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code

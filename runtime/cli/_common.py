"""Shared CLI helpers: exit codes, the error type commands raise."""

from __future__ import annotations

import argparse
import re
import sys

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

SubParsers = argparse._SubParsersAction  # noqa: SLF001 - stdlib type with no public name


class CliError(Exception):
    """A command failed; the message is printed as one line and the process exits."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def say(message: str) -> None:
    """Progress of long work (a cold Zig build), on stderr: stdout carries the result."""
    print(message, file=sys.stderr, flush=True)


_RST_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(doc: str) -> str:
    """A module docstring as ``--help`` text: ``literal`` markup shown as plain `literal`."""
    return _RST_LITERAL.sub(r"\1", doc)

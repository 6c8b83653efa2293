"""The CLI skeleton: help everywhere, version, exit codes."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from wasmgate import __version__
from wasmgate.runtime.cli import build_parser, main
from wasmgate.runtime.cli._common import SubParsers

COMMANDS = [
    "serve", "keygen", "bundle", "trust", "adapter", "run-guest", "profiles", "quantize", "bench",
    "doctor", "fleet",
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_help_for_every_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"usage: wasmgate {command}" in capsys.readouterr().out


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:  # noqa: SLF001 - argparse lists subcommands nowhere else
        if isinstance(action, SubParsers):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def test_no_rst_markup_in_any_help() -> None:
    """Help is read in a terminal: ``literal`` and :role: markup belong to docstrings only."""
    for parser in _all_parsers(build_parser()):
        text = parser.format_help()
        assert "``" not in text, text
        assert not re.search(r":(class|func|meth|mod):`", text), text


def test_every_command_is_registered() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for command in COMMANDS:
        assert command in help_text


def test_version_and_module_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "wasmgate", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().startswith(f"wasmgate {__version__} (commit ")


def test_usage_error_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err

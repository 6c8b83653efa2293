"""The ``wasmgate`` command line: one module per subcommand, registered here.

Exit codes: 0 ok, 1 failure, 2 usage error (including "not implemented yet", and a command
whose extra is not installed: one line names the command that adds it, `wasmgate.extras`).

Only the chosen subcommand's module is imported when the command line names one: the
others pull in what ``serve`` never uses (ONNX Runtime's quantization tools, the adapter
toolchain), which cost a noticeable part of the daemon's start-up. ``wasmgate --help``
and an unknown command still register every subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from wasmgate import describe
from wasmgate.extras import MissingExtra
from wasmgate.runtime.cli._common import EXIT_USAGE, CliError
from wasmgate.runtime.ops import startgc

_COMMANDS = {
    "serve": "serve",
    "keygen": "keygen",
    "bundle": "bundle",
    "release": "release",
    "trust": "trust",
    "adapter": "adapter",
    "run-guest": "run_guest",
    "profiles": "profiles",
    "quantize": "quantize",
    "bench": "bench",
    "doctor": "doctor",
    "fleet": "fleet",
    "samples": "samples",
}
"""Subcommand name -> module under `wasmgate.runtime.cli` (its ``register`` adds it)."""


def _no_ort_telemetry() -> None:
    """ONNX Runtime's telemetry off, unless the operator chose otherwise, before any command
    loads it: since 1.2x its Linux builds write a lasting device id on first use
    (``$XDG_CACHE_HOME`` or ``~/.cache``: ``Microsoft/DeveloperTools/.onnxruntime/deviceid``
    and ``onnxruntime.db``; under the unit, HOME is the state directory) and may send usage
    events. ``ORT_DISABLE_TELEMETRY=1`` stops both: nothing is written (checked by
    tests/runtime/test_ort_telemetry.py). The variable is read when ONNX Runtime creates its
    environment, so it is set here, in the process, not left to each caller."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


class _Version(argparse.Action):
    """``--version`` on one line (argparse's own action wraps it at the terminal width, and
    scripts read the line: the version, then the commit the build came from)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(describe())
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or only ``only`` (a name of `_COMMANDS`)."""
    parser = argparse.ArgumentParser(
        prog="wasmgate",
        description="WebAssembly-sandboxed edge inference runtime.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the version and commit, then exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f"wasmgate.runtime.cli.{module}").register(sub)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand the command line names (its first word), if it is a known one."""
    first = next(iter(argv), None)
    return first if first in _COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    _no_ort_telemetry()
    chosen = _chosen(words)
    # The daemon's start runs without the cyclic collector, until READY (ops/startgc.py).
    paused = chosen == "serve" and startgc.pause()
    try:
        parser = build_parser(chosen)
        args = parser.parse_args(words)
        code: int = args.func(args)
    except CliError as e:
        print(f"wasmgate {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except MissingExtra as e:  # this install lacks a part (adapter authoring on a gateway)
        print(f"wasmgate {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    finally:
        if paused:
            startgc.resume()  # a start that failed before READY, or the daemon stopped
    return code


__all__ = ["EXIT_USAGE", "build_parser", "main"]

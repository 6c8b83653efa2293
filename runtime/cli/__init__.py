"""The ``wasmgate`` command line: one module per subcommand, registered here.

Exit codes: 0 ok, 1 failure, 2 usage error (including "not implemented yet").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from wasmgate import __version__
from wasmgate.runtime.cli import (
    adapter,
    bench,
    bundle,
    doctor,
    keygen,
    profiles,
    quantize,
    release,
    run_guest,
    serve,
    trust,
)
from wasmgate.runtime.cli._common import EXIT_USAGE, CliError

_COMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    serve.register,
    keygen.register,
    bundle.register,
    release.register,
    trust.register,
    adapter.register,
    run_guest.register,
    profiles.register,
    quantize.register,
    bench.register,
    doctor.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wasmgate",
        description="WebAssembly-sandboxed edge inference runtime.",
    )
    parser.add_argument("--version", action="version", version=f"wasmgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _COMMANDS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as e:
        print(f"wasmgate {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    return code


__all__ = ["EXIT_USAGE", "build_parser", "main"]

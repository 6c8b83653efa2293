"""`wasmgate run-guest`: Run a WASI command module with wasi-nn (like wasmedge)."""

from __future__ import annotations

import argparse

from wasmgate.runtime.cli._common import SubParsers, not_implemented


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "run-guest",
        help="Run a WASI command module with wasi-nn (like wasmedge).",
        description="Run a WASI command module with wasi-nn (like wasmedge).",
    )
    parser.set_defaults(func=_run)


def _run(_args: argparse.Namespace) -> int:
    return not_implemented(4)

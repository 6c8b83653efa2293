"""`wasmgate bench`: Run the benchmark suite."""

from __future__ import annotations

import argparse

from wasmgate.runtime.cli._common import SubParsers, not_implemented


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "bench", help="Run the benchmark suite.", description="Run the benchmark suite."
    )
    parser.set_defaults(func=_run)


def _run(_args: argparse.Namespace) -> int:
    return not_implemented(9)

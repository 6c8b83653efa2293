"""`wasmgate profiles`: List, show and detect device profiles."""

from __future__ import annotations

import argparse

from wasmgate.runtime.cli._common import SubParsers, not_implemented


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "profiles",
        help="List, show and detect device profiles.",
        description="List, show and detect device profiles.",
    )
    parser.set_defaults(func=_run)


def _run(_args: argparse.Namespace) -> int:
    return not_implemented(5)

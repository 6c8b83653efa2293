"""`wasmgate bundle`: Build, verify and inspect signed bundles."""

from __future__ import annotations

import argparse

from wasmgate.runtime.cli._common import SubParsers, not_implemented


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "bundle",
        help="Build, verify and inspect signed bundles.",
        description="Build, verify and inspect signed bundles.",
    )
    parser.set_defaults(func=_run)


def _run(_args: argparse.Namespace) -> int:
    return not_implemented(3)

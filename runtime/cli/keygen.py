"""`wasmgate keygen`: Generate an Ed25519 signing key."""

from __future__ import annotations

import argparse

from wasmgate.runtime.cli._common import SubParsers, not_implemented


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "keygen",
        help="Generate an Ed25519 signing key.",
        description="Generate an Ed25519 signing key.",
    )
    parser.set_defaults(func=_run)


def _run(_args: argparse.Namespace) -> int:
    return not_implemented(3)

"""`wasmgate bench`: run the benchmark suite from a source checkout.

The suite lives in the repository's ``bench/`` folder (with the test fixtures it builds
models and bundles from), which the wheel does not install; from a checkout this command
runs exactly ``python -m bench`` there, as a child process, so the installed package never
imports the benchmark code.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

from wasmgate.runtime.cli._common import EXIT_USAGE, CliError, SubParsers


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "bench",
        help="Run the benchmark suite (source checkout).",
        description="Run the benchmark suite: one table of figures, each against a baseline "
        "measured in the same run; JSON in bench/results/latest.json. Needs a source "
        "checkout (same as `python -m bench`).",
    )
    parser.add_argument("--quick", action="store_true", help="only check every scenario runs")
    parser.add_argument("--json", type=Path, default=None, help="JSON output file")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these scenarios")
    parser.set_defaults(func=_run)


def checkout() -> Path | None:
    """The source checkout this wasmgate runs from, if any (it holds bench/ and tests/)."""
    spec = importlib.util.find_spec("wasmgate.runtime")
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    for parent in origin.parents if origin is not None else ():
        if (parent / "bench" / "suite.py").is_file() and (parent / "tests").is_dir():
            return parent
    return None


def _run(args: argparse.Namespace) -> int:
    root = checkout()
    if root is None:
        raise CliError(
            "the benchmark suite is not part of the installed package: run it from a source "
            "checkout with `python -m bench [--quick]` (or `wasmgate bench` there)",
            EXIT_USAGE,
        )
    argv = ["--quick"] if args.quick else []
    if args.json is not None:
        argv += ["--json", str(args.json.resolve())]
    if args.only:
        argv += ["--only", *args.only]
    return run_suite(root, argv)


def run_suite(root: Path, argv: list[str]) -> int:
    """``python -m bench ARGV`` in the checkout; its exit code."""
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=root, check=False).returncode

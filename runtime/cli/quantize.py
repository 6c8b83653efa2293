"""`wasmgate quantize`: Quantize an ONNX model to INT8."""

from __future__ import annotations

import argparse

from wasmgate.runtime.cli._common import SubParsers, not_implemented


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "quantize",
        help="Quantize an ONNX model to INT8.",
        description="Quantize an ONNX model to INT8.",
    )
    parser.set_defaults(func=_run)


def _run(_args: argparse.Namespace) -> int:
    return not_implemented(5)

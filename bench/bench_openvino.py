"""OpenVINO EP vs the CPU EP, same run, same ONNX Runtime build (`onnxruntime-openvino`):
session creation, first run, steady-state p50 at batch 1 and 8, fp32 and int8 (digits MLP and
the MobileNet-class CNN).

``python -m bench.bench_openvino [--quick]`` (needs ``WASMGATE_OPENVINO_PYTHON``: run
``eval export $(.ci/openvino-setup)`` first). The measuring runs in that venv
(`bench.openvino_child`); ratios are OpenVINO / CPU EP (below 1: OpenVINO faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.common import Figure, format_table
from tests.fixtures.models import get_models

ROOT = Path(__file__).resolve().parent.parent
FIGURES = {
    "create_ms": "session creation",
    "first_ms": "first run",
    "p50_b1_ms": "p50 batch 1",
    "p50_b8_ms": "p50 batch 8",
}


def run(quick: bool) -> list[Figure]:
    python = os.environ.get("WASMGATE_OPENVINO_PYTHON")
    if not python:
        raise RuntimeError("WASMGATE_OPENVINO_PYTHON not set: eval export $(.ci/openvino-setup)")
    models = get_models()
    paths = [models.digits_fp32, models.digits_int8, models.mobilenet_fp32, models.mobilenet_int8]
    rounds = "5" if quick else "200"
    done = subprocess.run(
        [python, "-m", "bench.openvino_child", "--rounds", rounds, *map(str, paths)],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    figures = []
    for model, eps in json.loads(done.stdout).items():
        for key, what in FIGURES.items():
            figures.append(
                Figure(
                    "openvino",
                    f"{model} {what}",
                    eps["openvino"][key],
                    "ms",
                    f"{model} {what} on the CPU EP",
                    eps["cpu"][key],
                )
            )
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(format_table(run(args.quick)))


if __name__ == "__main__":
    main()

"""The measuring side of `bench.bench_openvino`, run by the OpenVINO venv's python (its
`onnxruntime` is the `onnxruntime-openvino` build, which has both EPs).

``python -m bench.openvino_child --rounds R MODEL.onnx ...`` prints one JSON object:
``{model: {ep: {"create_ms", "first_ms", "p50_b1_ms", "p50_b8_ms"}}}``. Both EPs load through
wasmgate's ONNX backend (the daemon's path: input checks, placement, no cache directory, so
every creation compiles), alternating per round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wasmgate.device_profiles import DeviceProfile, parse_profile
from wasmgate.runtime.backends import LoadedModel, LoadOptions, ModelSpec, create_backend

EPS = {
    "openvino": '{ name = "OpenVINOExecutionProvider", options = { device_type = "CPU" } }, '
    '{ name = "CPUExecutionProvider" }',
    "cpu": '{ name = "CPUExecutionProvider" }',
}


def profile(providers: str) -> DeviceProfile:
    return parse_profile(
        'name = "b"\ndescription = "b"\nprecision = ["int8", "fp32"]\n[cpu]\narch = "x86_64"\n'
        f"[onnxruntime]\nproviders = [{providers}]\n"
        'session_config = { "session.intra_op.allow_spinning" = "0" }\n'
    )


def _ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 3)


def measure(path: Path, eps: dict[str, DeviceProfile], rounds: int) -> dict[str, Any]:
    data, backend = path.read_bytes(), create_backend("onnx")
    shape = (3, 128, 128) if "mobilenet" in path.name else (64,)
    rng = np.random.default_rng(0)
    xs = {b: rng.standard_normal((b, *shape)).astype(np.float32) for b in (1, 8)}
    create: dict[str, list[float]] = {k: [] for k in eps}
    first: dict[str, list[float]] = {k: [] for k in eps}
    models: dict[str, LoadedModel] = {}
    for _ in range(max(3, rounds // 10)):  # creation and first run, alternating EPs
        for name, prof in eps.items():
            t0 = time.perf_counter()
            model = backend.load(data, ModelSpec(path.stem), LoadOptions(prof))
            t1 = time.perf_counter()
            model.infer([xs[1]])
            first[name].append(time.perf_counter() - t1)
            create[name].append(t1 - t0)
            placement = model.placement
            models.setdefault(name, model)
            assert name != "openvino" or placement.startswith("OpenVINOExecutionProvider 100%")
    steady: dict[tuple[str, int], list[float]] = {(k, b): [] for k in eps for b in xs}
    for _ in range(rounds):
        for (name, b), times in steady.items():
            t0 = time.perf_counter()
            models[name].infer([xs[b]])
            times.append(time.perf_counter() - t0)
    return {
        name: {
            "create_ms": _ms(create[name]),
            "first_ms": _ms(first[name]),
            "p50_b1_ms": _ms(steady[(name, 1)]),
            "p50_b8_ms": _ms(steady[(name, 8)]),
            "placement": models[name].placement,
        }
        for name in eps
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("models", nargs="+", type=Path)
    args = parser.parse_args(argv)
    eps = {name: profile(text) for name, text in EPS.items()}
    out = {path.stem: measure(path, eps, args.rounds) for path in args.models}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

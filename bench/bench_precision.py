"""INT8 vs FP32 latency (and digits accuracy); LiteRT vs ONNX Runtime on the same INT8 model;
INT4 weight-only vs INT8 vs FP32 on the generated transformer-style model (latency, size and
agreement with FP32).

``python -m bench.bench_precision [--rounds R] [--json OUT]``

All models go through wasmgate's own backends with the detected device profile (so the
figures include our input checks and, for LiteRT, the int8 quantize/dequantize of I/O).
Latencies are medians of R interleaved rounds at batch 1; ratios are against the baseline
measured in the same run. Digits accuracy is on the 450 held-out images.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from bench.common import Figure, format_table, median, write_json
from tests.fixtures.models import generator, get_models
from wasmgate.device_profiles import DeviceProfile, detect
from wasmgate.guest_adapters.quantize import quantize_model
from wasmgate.guest_adapters.quantize_int4 import quantize_int4
from wasmgate.runtime.backends import LoadedModel, LoadOptions, ModelSpec, create_backend

Array = npt.NDArray[Any]


def load(fmt: str, path: Path, profile: DeviceProfile, precision: str) -> LoadedModel:
    options = LoadOptions(profile, precision)  # type: ignore[arg-type]
    return create_backend(fmt).load(path.read_bytes(), ModelSpec(path.stem), options)


def interleaved(models: dict[str, LoadedModel], x: Array, rounds: int) -> dict[str, float]:
    """Median seconds per call of each model, measured in alternating rounds."""
    for m in models.values():
        for _ in range(5):
            m.infer([x])
    times: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(rounds):
        for k, m in models.items():
            t0 = time.perf_counter()
            m.infer([x])
            times[k].append(time.perf_counter() - t0)
    return {k: median(v) for k, v in times.items()}


def accuracy(model: LoadedModel, x: Array, y: Array) -> tuple[float, Array]:
    pred = np.concatenate([model.infer([x[i : i + 1]])[0] for i in range(len(x))]).argmax(1)
    return float((pred == y).mean()), pred


def mobilenet_figures(profile: DeviceProfile, rounds: int) -> list[Figure]:
    m = get_models()
    models = {
        "fp32": load("onnx", m.mobilenet_fp32, profile, "fp32"),
        "int8": load("onnx", m.mobilenet_int8, profile, "int8"),
    }
    x = np.random.default_rng(0).normal(size=(1, 3, 128, 128)).astype(np.float32)
    t = interleaved(models, x, rounds)
    return [
        Figure("mobilenet", "ORT int8 latency", t["int8"] * 1e3, "ms", "ORT fp32", t["fp32"] * 1e3),
    ]


def digits_figures(profile: DeviceProfile, rounds: int) -> list[Figure]:
    m = get_models()
    test = np.load(m.digits_test)
    x, y = test["x"].astype(np.float32), test["y"]
    models = {
        "ort-fp32": load("onnx", m.digits_fp32, profile, "fp32"),
        "ort-int8": load("onnx", m.digits_int8, profile, "int8"),
        "litert-fp32": load("tflite", m.digits_fp32_tflite, profile, "fp32"),
        "litert-int8": load("tflite", m.digits_int8_tflite, profile, "int8"),
    }
    t = interleaved(models, x[:1], rounds)
    acc = {k: accuracy(v, x, y) for k, v in models.items()}
    same = float((acc["litert-int8"][1] == acc["ort-int8"][1]).mean())
    us = {k: v * 1e6 for k, v in t.items()}
    return [
        Figure("digits", "ORT int8 latency", us["ort-int8"], "us", "ORT fp32", us["ort-fp32"]),
        Figure("digits", "ORT int8 accuracy %", acc["ort-int8"][0] * 100, "%", "ORT fp32",
               acc["ort-fp32"][0] * 100, lower_is_better=False),
        Figure("digits", "LiteRT int8 latency", us["litert-int8"], "us", "ORT int8",
               us["ort-int8"]),
        Figure("digits", "LiteRT int8 accuracy %", acc["litert-int8"][0] * 100, "%", "ORT int8",
               acc["ort-int8"][0] * 100, lower_is_better=False),
        Figure("digits", "LiteRT int8 argmax = ORT int8 %", same * 100, "%", "all", 100.0,
               lower_is_better=False),
        Figure("digits", "LiteRT fp32 latency", us["litert-fp32"], "us", "ORT fp32",
               us["ort-fp32"]),
    ]  # fmt: skip


def transformer_figures(profile: DeviceProfile, rounds: int) -> list[Figure]:
    """FP32, dynamic INT8 and INT4 (block 32) variants of the transformer-style model."""
    gen = generator("gen_transformer")
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "t-fp32.onnx"
        fp32.write_bytes(gen.transformer_onnx())
        x, y = gen.labelled(fp32.read_bytes())
        quantize_model(fp32, Path(tmp) / "t-int8.onnx")
        quantize_int4(fp32, Path(tmp) / "t-int4.onnx", block_size=32)
        paths = {p: Path(tmp) / f"t-{p}.onnx" for p in ("fp32", "int8", "int4")}
        models = {p: load("onnx", path, profile, p) for p, path in paths.items()}
        size = {p: path.stat().st_size / 1024 for p, path in paths.items()}
    t = {k: v * 1e6 for k, v in interleaved(models, x[:1], rounds).items()}
    acc = {k: accuracy(v, x, y)[0] * 100 for k, v in models.items()}
    name = "transformer"
    return [
        Figure(name, "ORT int4 latency", t["int4"], "us", "ORT int8", t["int8"]),
        Figure(name, "ORT int4 latency ", t["int4"], "us", "ORT fp32", t["fp32"]),
        Figure(name, "int4 file size", size["int4"], "KiB", "int8 file", size["int8"]),
        Figure(name, "int4 file size ", size["int4"], "KiB", "fp32 file", size["fp32"]),
        Figure(name, "int4 agrees with fp32 %", acc["int4"], "%", "int8", acc["int8"],
               lower_is_better=False),
    ]  # fmt: skip


def run(quick: bool) -> list[Figure]:
    """The suite's entry: 100 rounds (``quick``: 5)."""
    rounds = 5 if quick else 100
    profile = detect().profile
    figures = mobilenet_figures(profile, max(5, rounds // 4)) + digits_figures(profile, rounds * 10)
    return figures + transformer_figures(profile, rounds * 4)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200, help="interleaved rounds per model")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    profile = detect().profile
    figures = mobilenet_figures(profile, max(20, args.rounds // 4))
    figures += digits_figures(profile, args.rounds * 10)
    figures += transformer_figures(profile, args.rounds * 4)
    print(f"profile {profile.name}, ORT {ort.__version__}, {os.cpu_count()} CPUs, batch 1")
    print("ratio = value / baseline (latency: < 1 means faster than the baseline)")
    print(format_table(figures))
    if args.json:
        write_json(figures, args.json, {"profile": profile.name, "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()

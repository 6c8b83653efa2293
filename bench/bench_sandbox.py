"""Sandbox overhead: a sandboxed request vs the raw backend model's ``infer``, same run.

    python bench/bench_sandbox.py [--rounds N] [--json out.json]

Per request the sandbox creates a fresh store + instance of a C adapter, runs its handler,
and does one wasi-nn round trip (load_by_name, set_input, compute, get_output) on the same
backend model (ONNX Runtime, generic CPU profile, as the daemon loads it) the raw baseline
calls with the same input. Models: the digits MLP (64→32→10,
``guest_adapters/models/digits-fp32.onnx``) and a MobileNet-class CNN (the shared
``mobilenet-fp32.onnx`` from the test cache, else built with ``gen_mobilenet.build()``).
Also: instantiate cost, and cold compile vs cached load of the adapter module.
Goals: <= 1.3x raw on digits, <= 1.05x on MobileNet-class.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort

from bench.common import Figure, format_table, median, timed, write_json
from tests.fixtures.backends import load_model
from tests.fixtures.zig import compile_c
from wasmgate.runtime.backends import LoadedModel
from wasmgate.sandbox import GuestLimits, SandboxEngine

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "guest_adapters" / "models"
GUEST = REPO / "tests" / "sandbox" / "guests" / "bench_adapter.c"


class Named:
    """The provider the adapter sees: one model under its name."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model

    def by_name(self, name: str) -> LoadedModel | None:
        return self.model if name == self.model.name else None

    def from_bytes(self, data: bytes, encoding: str, target: str) -> None:  # noqa: ARG002
        return None


def mobilenet_bytes() -> bytes:
    root = Path(os.environ.get("WASMGATE_TEST_CACHE") or Path.home() / ".cache" / "wasmgate-tests")
    for path in sorted(root.glob("models-*/mobilenet-fp32.onnx")):
        return path.read_bytes()
    spec = importlib.util.spec_from_file_location("gen_mobilenet", MODELS / "gen_mobilenet.py")
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    model: onnx.ModelProto = gen.build()
    return bytes(model.SerializeToString())


def payload(x: npt.NDArray[np.float32]) -> bytes:
    return struct.pack(f"<{1 + x.ndim}I", x.ndim, *x.shape) + x.tobytes()


def bench_model(  # noqa: PLR0917
    engine: SandboxEngine, wasm: bytes, label: str, data: bytes, x: npt.NDArray[Any], rounds: int
) -> list[Figure]:
    model = load_model(data, label)
    # The baseline: a plain ONNX Runtime session on the same bytes and input.
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    adapter = engine.compile(wasm, name="bench")
    provider, body = Named(model), payload(x)
    meta = {"param.model": label}
    limits = GuestLimits(deadline_s=10.0)
    want = model.infer([x])[0].tobytes()
    assert adapter.run(body, meta, provider, limits).output == want
    pooled = adapter.with_mode("pooled")
    raw: list[float] = []
    bare: list[float] = []
    sandboxed: list[float] = []
    reused: list[float] = []
    instantiate: list[float] = []
    for _ in range(rounds):  # interleaved, so drift on a shared VM hits all alike
        raw += timed(lambda: model.infer([x]), repeat=1, warmup=0)
        bare += timed(lambda: session.run(None, feed), repeat=1, warmup=0)
        sandboxed += timed(
            lambda: instantiate.append(adapter.run(body, meta, provider, limits).instantiate_s),
            repeat=1,
            warmup=0,
        )
        reused += timed(lambda: pooled.run(body, meta, provider, limits), repeat=1, warmup=0)
    r, s, p = median(raw), median(sandboxed), median(reused)
    base = ("raw model.infer", r * 1e6)
    return [
        Figure(label, "sandboxed request", s * 1e6, "us", "raw session.run", median(bare) * 1e6),
        Figure(label, "sandboxed request", s * 1e6, "us", *base),
        Figure(label, "overhead per request", (s - r) * 1e6, "us", *base),
        Figure(label, "instantiate (+_initialize)", median(instantiate) * 1e6, "us", *base),
        Figure(label, "pooled-mode request", p * 1e6, "us", *base),
    ]


def bench_compile(wasm: bytes, rounds: int) -> list[Figure]:
    cold: list[float] = []
    cached: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            with SandboxEngine(Path(tmp) / f"c{i}") as eng:
                cold += timed(lambda e=eng: e.load_module(wasm), repeat=1, warmup=0)  # type: ignore[misc]
                cached += timed(lambda e=eng: e.load_module(wasm), repeat=1, warmup=0)  # type: ignore[misc]
    c, k = median(cold), median(cached)
    return [
        Figure(
            "adapter module", "cached load (deserialize)", k * 1e3, "ms", "cold compile", c * 1e3
        )
    ]


def run(quick: bool, rounds: int = 300) -> list[Figure]:
    """Digits and MobileNet-class, sandboxed vs raw; ``quick``: a few rounds each."""
    rounds = 5 if quick else rounds
    wasm = compile_c([GUEST]).read_bytes()
    rng = np.random.default_rng(0)
    digits_x = rng.uniform(0, 16, (1, 64)).astype(np.float32)
    mobile_x = rng.standard_normal((1, 3, 128, 128)).astype(np.float32)
    figures: list[Figure] = []
    with (
        tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp,
        SandboxEngine(Path(tmp) / "cache") as engine,
    ):
        figures += bench_model(engine, wasm, "digits", (MODELS / "digits-fp32.onnx").read_bytes(),
                               digits_x, rounds)  # fmt: skip
        figures += bench_model(engine, wasm, "mobilenet", mobilenet_bytes(), mobile_x,
                               max(5 if quick else 20, rounds // 10))  # fmt: skip
    return figures + bench_compile(wasm, 2 if quick else 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = run(quick=False, rounds=args.rounds)
    print(format_table(figures))
    ratios = {f.scenario: f.ratio for f in figures if f.name == "sandboxed request"}
    print(f"\ngoal digits <= 1.30x: {ratios['digits']:.2f}x; "
          f"mobilenet <= 1.05x: {ratios['mobilenet']:.2f}x")  # fmt: skip
    if args.json:
        write_json(figures, args.json, {"machine": platform.machine(), "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()

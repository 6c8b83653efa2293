"""Sandbox overhead: a sandboxed request vs the raw backend model's ``infer``, same run.

    python -m bench.bench_sandbox [--rounds N] [--json out.json]

Per request the sandbox runs a C adapter's handler in an instance nobody used before (a
spare, made ready on the engine's background thread between requests: the bench lets it
finish, untimed, before each timed call; "back-to-back" is the same request in a tight loop,
where the next spare is built while the next request runs; "without spares" instantiates
on the request's path, as before spares), with one ``load_by_name`` and
one fused ``wasmgate.nn_infer_f32`` on the same backend model (ONNX Runtime, generic CPU
profile, as the daemon loads it) the raw baseline calls with the same input. Models: the
digits MLP (64→32→10, ``guest_adapters/models/digits-fp32.onnx``) and a MobileNet-class
CNN (the shared ``mobilenet-fp32.onnx`` from the test cache, else ``gen_mobilenet.build()``).
Also: the time to get the instance ready, the guest's own time (handler and host calls
without the model run), the share of requests served on a spare, pooled mode, and cold
compile vs cached load of the adapter module.
Goals: overhead <= 100 us over raw ``model.infer`` on digits; <= 1.05x on MobileNet-class.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import struct
import tempfile
from collections.abc import Callable
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
from wasmgate.sandbox import Ceilings, GuestLimits, GuestResult, SandboxEngine

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
    engines: tuple[SandboxEngine, SandboxEngine],
    wasm: bytes,
    label: str,
    data: bytes,
    x: npt.NDArray[Any],
    rounds: int,
) -> list[Figure]:
    engine, spareless = engines
    model = load_model(data, label)
    # The baseline: a plain ONNX Runtime session on the same bytes and input.
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    adapter = engine.compile(wasm, name="bench")
    provider, body = Named(model), payload(x)
    meta = {"param.model": label}
    limits = GuestLimits(deadline_s=10.0, memory_bytes=256 * 1024 * 1024)  # pooled leaks
    want = model.infer([x])[0].tobytes()
    assert adapter.run(body, meta, provider, limits).output == want
    pooled = adapter.with_mode("pooled")
    inline = spareless.compile(wasm, name="bench")  # every instance made on the request path
    raw: list[float] = []
    on_path: list[float] = []
    bare: list[float] = []
    results: list[GuestResult] = []
    sandboxed: list[float] = []
    reused: list[float] = []

    def quiet(fn: Callable[[], object]) -> list[float]:
        engine.settle()  # the spare for the next request is built between requests, untimed
        spareless.settle()  # (it closes used stores in the background too)
        return timed(fn, repeat=1, warmup=0)

    for _ in range(rounds):  # interleaved, so drift on a shared VM hits all alike
        raw += quiet(lambda: model.infer([x]))
        bare += quiet(lambda: session.run(None, feed))
        sandboxed += quiet(lambda: results.append(adapter.run(body, meta, provider, limits)))
        reused += quiet(lambda: pooled.run(body, meta, provider, limits))
        on_path += quiet(lambda: inline.run(body, meta, provider, limits))
    engine.settle()
    burst = timed(lambda: adapter.run(body, meta, provider, limits), repeat=rounds, warmup=0)
    adapter.close()
    r, s, p = median(raw), median(sandboxed), median(reused)
    base = ("raw model.infer", r * 1e6)
    taken = median([res.instantiate_s for res in results]) * 1e6
    guest = median([res.run_s - res.infer_s for res in results]) * 1e6
    spared = sum(res.from_spare for res in results) / len(results) * 100
    return [
        Figure(label, "sandboxed request", s * 1e6, "us", "raw session.run", median(bare) * 1e6),
        Figure(label, "sandboxed request", s * 1e6, "us", *base),
        Figure(label, "overhead per request", (s - r) * 1e6, "us", *base),
        Figure(label, "instance ready (spare taken)", taken, "us", *base),
        Figure(label, "guest + host calls (no infer)", guest, "us", *base),
        Figure(label, "on a spare", spared, "%", "all requests", 100.0, lower_is_better=False),
        Figure(label, "back-to-back request", median(burst) * 1e6, "us", *base),
        Figure(label, "request without spares", median(on_path) * 1e6, "us", *base),
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
        SandboxEngine(Path(tmp) / "cache0", Ceilings(spare_instances=0)) as spareless,
    ):
        engines = (engine, spareless)
        figures += bench_model(engines, wasm, "digits", (MODELS / "digits-fp32.onnx").read_bytes(),
                               digits_x, rounds)  # fmt: skip
        figures += bench_model(engines, wasm, "mobilenet", mobilenet_bytes(), mobile_x,
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
    over = {f.scenario: f.value for f in figures if f.name == "overhead per request"}
    print(f"\ngoal digits overhead <= 100 us: {over['digits']:.0f} us ({ratios['digits']:.2f}x);"
          f" mobilenet <= 1.05x: {ratios['mobilenet']:.2f}x")  # fmt: skip
    if args.json:
        write_json(figures, args.json, {"machine": platform.machine(), "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()

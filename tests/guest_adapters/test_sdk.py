"""The SDK helpers (wasmgate.h) inside the real sandbox: JSON subset, writer, math, params."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixtures.cache import cache_dir
from tests.guest_adapters.helpers import LIMITS, RecordingModels
from wasmgate.guest_adapters.build import build_adapter
from wasmgate.sandbox import Adapter, GuestResult, SandboxEngine

PROBE = Path(__file__).parent / "guests" / "sdk_probe.c"


@pytest.fixture(scope="module")
def probe(engine: SandboxEngine) -> Adapter:
    wasm = build_adapter(PROBE, cache_dir=cache_dir("adapters")).path.read_bytes()
    return engine.compile(wasm, name="sdk-probe")


def run(probe: Adapter, payload: bytes, meta: dict[str, str] | None = None) -> GuestResult:
    return probe.run(payload, meta or {}, RecordingModels({}), LIMITS)


def answer(probe: Adapter, payload: bytes, meta: dict[str, str] | None = None) -> Any:
    res = run(probe, payload, meta)
    assert res.status == 0, res.output
    return json.loads(res.output)


def test_exports_only_the_abi_and_imports_only_allowed_modules() -> None:
    import wasmtime  # noqa: PLC0415

    wasm = build_adapter(PROBE, cache_dir=cache_dir("adapters")).path.read_bytes()
    module = wasmtime.Module(wasmtime.Engine(), wasm)
    exports = {e.name for e in module.exports}
    assert exports == {"memory", "_initialize", "wasmgate_abi_version", "wasmgate_alloc",
                       "wasmgate_handle"}  # fmt: skip
    assert {i.module for i in module.imports} <= {
        "wasmgate", "wasi_ephemeral_nn", "wasi_snapshot_preview1"
    }  # fmt: skip
    memory = next(e.type for e in module.exports if e.name == "memory")
    assert isinstance(memory, wasmtime.MemoryType)
    assert memory.limits.min * 65536 <= 1024 * 1024  # small stack: fits a 16 MiB manifest


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (b'{"a": [1, -2.5, 3e2, 0.125E-1], "s": "x\\"y\\\\z\\n\\u0041\\u00e9"}',
         {"type": 6, "get_a": 1, "floats_rc": 0, "a": [1, -2.5, 300, 0.0125],
          "copy_rc": 0, "s": 'x"y\\z\nA?'}),
        (b' { "b" : {"a": [9]}, "a" : [ ] } ', {"type": 6, "get_a": 1, "floats_rc": 0, "a": []}),
        (b'{"a": [1, 2, 3, 4, 5, 6, 7, 8, 9]}', {"type": 6, "get_a": 1, "floats_rc": -2,
                                                  "a": [1, 2, 3, 4, 5, 6, 7, 8]}),
        (b'{"a": [1, "2"]}', {"type": 6, "get_a": 1, "floats_rc": -1, "a": [1]}),
        (b'{"s": "abcdefghijklmnopqrstuvwxyz"}', {"type": 6, "get_a": 0, "copy_rc": -2,
                                                  "s": "abcdefghijklmno"}),
        (b'[1, [2, {"x": 3}]]', {"type": 5}),
        (b"true", {"type": 2}),
        (b"null", {"type": 1}),
        (b"-0.5", {"type": 3}),
    ],
)  # fmt: skip
def test_json_subset(probe: Adapter, doc: bytes, expected: dict[str, Any]) -> None:
    assert answer(probe, b"j" + doc) == expected


@pytest.mark.parametrize(
    "doc",
    [
        b"", b"{", b"}", b"[1,]", b"{,}", b'{"a" 1}', b'{"a": 1,}', b"[1 2]", b"01x", b"-",
        b"1.", b"1e", b'"\x01"', b'"abc', b"[}", b"{]", b"tru", b"nul", b"[1] [2]", b"NaN",
        b"1e400", b"[" * 33 + b"]" * 33, b"[" * 1_000_000, b"\xff",
    ],
)  # fmt: skip
def test_malformed_json_is_refused_without_trapping(probe: Adapter, doc: bytes) -> None:
    res = run(probe, b"j" + doc)
    assert (res.status, res.output) == (1, b"malformed JSON")


def test_nesting_up_to_the_limit_is_fine(probe: Adapter) -> None:
    assert answer(probe, b"j" + b"[" * 32 + b"]" * 32) == {"type": 5}


def test_quantize_matches_onnx_quantize_linear(probe: Adapter) -> None:
    x = [0.0, 0.04, 0.05, 0.15, -0.25, 1.0, -100.0, 100.0, 12.6, -12.5]
    got = answer(probe, b"q" + json.dumps({"x": x}).encode())
    xs = np.array(x, dtype=np.float32)
    # ONNX QuantizeLinear: saturate(round_half_to_even(x / scale) + zero_point)
    want_i8 = np.clip(np.rint(xs / np.float32(0.1)) - 3, -128, 127).astype(int).tolist()
    want_u8 = np.clip(np.rint(xs / np.float32(0.1)) + 3, 0, 255).astype(int).tolist()
    assert got["i8"] == want_i8
    assert got["u8"] == want_u8
    np.testing.assert_allclose(got["back"], (np.array(want_i8) + 3) * 0.1, rtol=1e-6)


def test_softmax_is_stable_for_large_logits(probe: Adapter) -> None:
    got = answer(probe, b"m")
    assert got["argmax"] == 3
    assert got["p"][3] == 1
    assert all(math.isfinite(p) for p in got["p"])


def test_params_through_meta(probe: Adapter) -> None:
    meta = {"param.threshold": "0.75", "param.long": "x" * 100, "param.word": "abc"}
    assert answer(probe, b"pthreshold", meta) == {
        "small": 4, "big": 4, "value": "0.75", "double_rc": 0, "double": 0.75
    }  # fmt: skip
    # Too long for the 8-byte buffer: -2, never truncated silently.
    got = answer(probe, b"plong", meta)
    assert (got["small"], got["big"], got["value"]) == (-2, 100, "x" * 100)
    assert answer(probe, b"pmissing", meta) == {
        "small": -1, "big": -1, "double_rc": 0, "double": 42
    }  # fmt: skip
    assert answer(probe, b"pword", meta)["double_rc"] == -1


def test_writer_overflow_is_an_adapter_error(probe: Adapter) -> None:
    res = run(probe, b"o")
    assert (res.status, res.output) == (2, b"answer does not fit the adapter's buffer")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("1764410000.0", b"1764410000"),
        ("1764410000.125", b"1764410000.125"),
        ("0.1", b"0.1"),
        ("-2.5e-7", b"-2.5e-07"),
        ("1.5e300", b"1.5e+300"),
        ("0.3", b"0.3"),
        ("123456789.125", b"123456789.125"),
    ],
)
def test_numbers_round_trip(probe: Adapter, value: str, text: bytes) -> None:
    res = run(probe, b'n{"v": ' + value.encode() + b"}")
    assert res.output == text
    assert float(res.output) == float(value)

"""WasmEdge's wasi-nn extensions through the nn_proxy C guest (declared in the SDK header):
``load_by_name_with_config``, ``compute_single``, ``get_output_single``, ``fini_single``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.sandbox.helpers import DeclaredModels, Ptr, Script
from tests.sandbox.test_wasi_nn import (
    F32,
    FAR,
    INVALID_ARGUMENT,
    NOT_FOUND,
    OK,
    TOO_LARGE,
    affine_in,
    run,
)
from wasmgate.sandbox import Adapter
from wasmgate.sandbox.wasi_nn import NN_FUNCTIONS, NnErrno

END_OF_SEQUENCE = 100
EXPECTED = affine_in() * 2 + 1


def with_config(s: Script, name: bytes, config: bytes) -> Ptr:
    g = s.out()
    s.call("load_by_name_with_config", s.blob(name), len(name), s.blob(config), len(config), g)
    return g


def test_the_extensions_are_wasi_nn_imports_with_wasmedges_arities() -> None:
    assert {k: NN_FUNCTIONS[k] for k in NN_FUNCTIONS if "single" in k or "config" in k} == {
        "load_by_name_with_config": 5,
        "compute_single": 1,
        "get_output_single": 5,
        "fini_single": 1,
    }
    assert NnErrno.END_OF_SEQUENCE == END_OF_SEQUENCE


def test_streaming_loop_of_a_wasmedge_guest_ends_after_the_one_step(
    proxy: Adapter, declared: DeclaredModels
) -> None:
    s = Script()
    g = with_config(s, b"affine", b'{"n-gpu-layers": 0, "ctx-size": 512}')
    ctx = s.out()
    s.call("init_execution_context", 0, ctx)
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
    s.call("compute_single", 0)
    buf, written = s.out(16), s.out()
    s.call("get_output_single", 0, 0, buf, 16, written)
    s.call("compute_single", 0)  # the loop asks for another step: there is none
    s.call("compute_single", 0)
    s.call("fini_single", 0)
    s.call("compute_single", 0)  # a new sequence on the same inputs
    r, logs = run(proxy, declared, s)
    assert r.errnos == [OK, OK, OK, OK, OK, END_OF_SEQUENCE, END_OF_SEQUENCE, OK, OK]
    assert (r.u32(g), r.u32(ctx), r.u32(written)) == (0, 0, 16)
    assert np.frombuffer(r.raw(buf, 16), dtype="<f4").tolist() == EXPECTED.ravel().tolist()
    assert any("ignored ['ctx-size', 'n-gpu-layers']" in line for line in logs)


def test_new_input_starts_a_new_sequence(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    with_config(s, b"affine", b"")
    s.call("init_execution_context", 0, s.out())
    tensor = s.tensor([1, 4], F32, affine_in().tobytes())
    s.call("set_input", 0, 0, tensor)
    s.call("compute_single", 0)
    s.call("compute_single", 0)
    s.call("set_input", 0, 0, tensor)
    s.call("compute_single", 0)
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK, OK, OK, OK, END_OF_SEQUENCE, OK, OK]


def test_same_name_gives_the_same_graph_whatever_the_config(
    proxy: Adapter, declared: DeclaredModels
) -> None:
    s = Script()
    g1 = with_config(s, b"affine", b"{}")
    g2 = with_config(s, b"affine", b'{"threads": 2}')
    g3 = s.out()
    s.call("load_by_name", s.blob(b"affine"), 6, g3)
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK, OK, OK]
    assert r.u32(g1) == r.u32(g2) == r.u32(g3) == 0


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (b"[1, 2]", "top level is not a JSON object"),
        (b'{"a": NaN}', "constant NaN is not allowed"),
        (b'{"a": Infinity}', "constant Infinity is not allowed"),
        (b'{"a": 1, "a": 2}', "duplicate JSON key"),
        (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "not valid JSON"),
        (b'{"a": 1', "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_bad_configs_are_invalid_argument_and_load_nothing(
    proxy: Adapter, declared: DeclaredModels, config: bytes, why: str
) -> None:
    s = Script()
    g = with_config(s, b"affine", config)
    s.call("init_execution_context", 0, s.out())
    r, logs = run(proxy, declared, s)
    assert r.errnos == [INVALID_ARGUMENT, INVALID_ARGUMENT]  # no graph 0 was made
    assert r.u32(g) == 0
    assert any(why in line for line in logs)


def test_huge_config_is_too_large_and_unknown_name_not_found(
    proxy: Adapter, declared: DeclaredModels
) -> None:
    s = Script()
    big = b'{"k": "' + b"x" * (64 * 1024) + b'"}'
    with_config(s, b"affine", big)
    with_config(s, b"nope", b"{}")
    s.call("load_by_name_with_config", s.blob(b"affine"), 6, FAR, 8, s.out())
    s.call("load_by_name_with_config", s.blob(b"affine"), 6, s.blob(b"{}"), 2, FAR)
    r, _ = run(proxy, declared, s)
    assert r.errnos == [TOO_LARGE, NOT_FOUND, INVALID_ARGUMENT, INVALID_ARGUMENT]


@pytest.mark.parametrize(
    "call",
    [("compute_single", 42), ("get_output_single", 42, 0, "OUT", 4, "OUT"), ("fini_single", 9)],
)
def test_single_calls_on_contexts_from_nowhere(
    proxy: Adapter, declared: DeclaredModels, call: Sequence[Any]
) -> None:
    s = Script()
    with_config(s, b"affine", b"")
    s.call("init_execution_context", 0, s.out())
    s.call(call[0], *[s.out() if a == "OUT" else a for a in call[1:]])
    r, logs = run(proxy, declared, s)
    assert r.errnos == [OK, OK, INVALID_ARGUMENT]
    assert any("no execution context" in line for line in logs)


def test_single_step_errors_match_the_full_calls(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    with_config(s, b"affine", b"")
    s.call("init_execution_context", 0, s.out())
    s.call("compute_single", 0)  # inputs not set
    s.call("get_output_single", 0, 0, s.out(16), 16, s.out())  # before any step
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
    s.call("compute_single", 0)
    small, written = s.out(8), s.out()
    s.call("get_output_single", 0, 0, small, 8, written)
    s.call("get_output_single", 0, 3, s.out(16), 16, s.out())
    s.call("get_output_single", 0, 0, FAR, 16, s.out())
    s.call("fini_single", 0)
    s.call("get_output_single", 0, 0, s.out(16), 16, s.out())  # outputs gone with the sequence
    r, _ = run(proxy, declared, s)
    assert r.errnos == [
        OK, OK, INVALID_ARGUMENT, INVALID_ARGUMENT, OK, OK, TOO_LARGE, INVALID_ARGUMENT,
        INVALID_ARGUMENT, OK, INVALID_ARGUMENT,
    ]  # fmt: skip
    assert r.u32(written) == 16

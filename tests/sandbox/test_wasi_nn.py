"""wasi-nn conformance through a real C guest (nn_proxy) on real ORT sessions."""

from __future__ import annotations

import ctypes
import struct
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.fixtures.backends import load_model
from tests.sandbox.helpers import DeclaredModels, Ptr, Result, Script, model_bytes
from wasmgate.sandbox import Adapter, GuestLimits, TensorSpec

OK, INVALID_ARGUMENT, INVALID_ENCODING, RUNTIME_ERROR, TOO_LARGE, NOT_FOUND = 0, 1, 2, 5, 7, 8
F32, CUR_U8, CUR_I32, F64, I64, LEG_U8, LEG_I32 = 1, 3, 4, 2, 5, 2, 3
FAR = 0xFFFF_FF00  # beyond any guest memory


def run(proxy: Adapter, models: Any, script: Script) -> tuple[Result, list[str]]:
    res = proxy.run(script.payload(), {}, models, GuestLimits())
    assert res.status == 0
    return script.result(res.output), res.logs


def graph_named(s: Script, name: str) -> tuple[Ptr, Ptr]:
    g = s.out()
    ctx = s.out()
    s.call("load_by_name", s.blob(name.encode()), len(name), g)
    s.call("init_execution_context", 0, ctx)
    return g, ctx


def affine_in() -> npt.NDArray[np.float32]:
    return np.array([[1.0, 2.0, 3.5, -4.0]], dtype=np.float32)


def test_named_round_trip(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    g, ctx = graph_named(s, "affine")
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
    s.call("compute", 0)
    buf, written = s.out(16), s.out()
    s.call("get_output", 0, 0, buf, 16, written)
    g2 = s.out()
    s.call("load_by_name", s.blob(b"affine"), 6, g2)
    s.call("unload", 0)
    s.call("finalize_execution_context", 0)
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK] * 8
    assert (r.u32(g), r.u32(ctx), r.u32(g2), r.u32(written)) == (0, 0, 0, 16)
    out = np.frombuffer(r.raw(buf, 16), dtype="<f4")
    assert out.tolist() == (affine_in() * 2 + 1).ravel().tolist()


def test_handles_are_per_instance_and_infer_time_is_reported(
    proxy: Adapter, declared: DeclaredModels
) -> None:
    for _ in range(2):
        s = Script()
        g, ctx = graph_named(s, "affine")
        s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
        s.call("compute", 0)
        res = proxy.run(s.payload(), {}, declared, GuestLimits())
        r = s.result(res.output)
        assert r.errnos == [OK] * 4
        assert (r.u32(g), r.u32(ctx)) == (0, 0)
        assert res.infer_s > 0


def load_script(raw: bytes, encoding: int, target: int = 0, parts: int = 1) -> tuple[Script, Ptr]:
    s = Script()
    g = s.out()
    s.call("load", s.builders(*([raw] * parts)), parts, encoding, target, g)
    return s, g


@pytest.mark.parametrize("encoding", [1, 5])
def test_load_declared_bytes_onnx_and_autodetect(
    proxy: Adapter, declared: DeclaredModels, encoding: int
) -> None:
    s, _ = load_script(model_bytes()["affine"], encoding)
    ctx = s.out()
    s.call("init_execution_context", 0, ctx)
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
    s.call("compute", 0)
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK] * 4
    assert declared.from_bytes_calls[-1] == ("onnx", "cpu")


@pytest.mark.parametrize(
    ("encoding", "target", "parts", "errno"),
    [
        (0, 0, 1, INVALID_ENCODING),  # openvino
        (2, 0, 1, INVALID_ENCODING),  # tensorflow
        (3, 0, 1, INVALID_ENCODING),  # pytorch
        (99, 0, 1, INVALID_ENCODING),
        (1, 7, 1, INVALID_ARGUMENT),  # unknown target
        (1, 0, 2, INVALID_ARGUMENT),  # ONNX is one part
    ],
)
def test_load_rejections(  # noqa: PLR0917 - parametrized
    proxy: Adapter, declared: DeclaredModels, encoding: int, target: int, parts: int, errno: int
) -> None:
    s, _ = load_script(model_bytes()["affine"], encoding, target, parts)
    r, logs = run(proxy, declared, s)
    assert r.errnos == [errno]
    assert any("wasi-nn load" in line for line in logs)


def test_load_of_undeclared_bytes_is_refused(proxy: Adapter, declared: DeclaredModels) -> None:
    s, _ = load_script(model_bytes()["affine"] + b"\0", 1)
    r, logs = run(proxy, declared, s)
    assert r.errnos == [NOT_FOUND]
    assert any("may load" in line for line in logs)


def test_load_by_name_unknown_and_bad_utf8(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    s.call("load_by_name", s.blob(b"nope"), 4, s.out())
    s.call("load_by_name", s.blob(b"\xff\xfe"), 2, s.out())
    r, logs = run(proxy, declared, s)
    assert r.errnos == [NOT_FOUND, INVALID_ARGUMENT]
    assert any("no model named 'nope'" in line for line in logs)


def one_input(model: str, ty: int, arr: npt.NDArray[Any], **kw: Any) -> Script:
    s = Script()
    graph_named(s, model)
    s.call("set_input", 0, 0, s.tensor(kw.pop("dims", list(arr.shape)), ty, arr.tobytes(), **kw))
    s.call("compute", 0)
    return s


U8 = np.array([[1, 2, 3, 250]], dtype=np.uint8)


@pytest.mark.parametrize(
    ("model", "ty", "arr"),
    [
        ("u8", CUR_U8, U8),
        ("u8", LEG_U8, U8),  # 2023-era guests send 2 for u8
        ("i8", CUR_U8, U8.astype(np.int8)),  # witx has no i8: u8 bytes go to an INT8 input
        ("i32", CUR_I32, U8.astype(np.int32)),
        ("i32", LEG_I32, U8.astype(np.int32)),
        ("f64", F64, U8.astype(np.float64)),
        ("i64", I64, U8.astype(np.int64)),
        ("affine", F32, affine_in()),
    ],
)
def test_both_numberings_accepted_when_model_type_agrees(
    proxy: Adapter, declared: DeclaredModels, model: str, ty: int, arr: npt.NDArray[Any]
) -> None:
    s = one_input(model, ty, arr)
    buf, written = s.out(16), s.out()
    s.call("get_output", 0, 0, buf, 16, written)
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK] * 5
    got = np.frombuffer(r.raw(buf, 16), dtype="<f4")
    want = arr.astype(np.float32) * (0.5 if model != "affine" else 2) + (model == "affine")
    assert got.tolist() == want.ravel().tolist()


@pytest.mark.parametrize(
    ("model", "ty", "arr"),
    [
        ("u8", F32, U8),  # f32 declared, u8 model
        ("u8", CUR_I32, U8),
        ("f64", CUR_U8, U8.astype(np.float64)),  # 3 is u8 (current) or i32 (legacy), not f64
        ("affine", CUR_U8, affine_in()),
        ("i64", LEG_I32, U8.astype(np.int64)),
        ("affine", 200, affine_in()),  # no such type
    ],
)
def test_type_mismatch_is_invalid_argument(
    proxy: Adapter, declared: DeclaredModels, model: str, ty: int, arr: npt.NDArray[Any]
) -> None:
    r, logs = run(proxy, declared, one_input(model, ty, arr))
    assert r.errnos == [OK, OK, INVALID_ARGUMENT, INVALID_ARGUMENT]  # compute: input unset
    assert any("does not match the model's" in line for line in logs)
    if ty == F32:  # types by name, not only by number
        assert any("tensor type FP32 (wasi-nn type 1)" in line for line in logs), logs


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"data_len": 15}, "dims need"),
        ({"dims": [1, 5]}, "do not fit"),
        ({"dims": [4]}, "do not fit"),
        ({"dims": [0xFFFF_FFFF, 4]}, "dims need"),  # huge dims
        ({"dims": [1, 4], "rank": 1000}, "rank"),
        ({"abs_data": FAR}, "bad pointer"),
    ],
)
def test_bad_tensors_are_invalid_argument(
    proxy: Adapter, declared: DeclaredModels, kw: dict[str, Any], why: str
) -> None:
    r, logs = run(proxy, declared, one_input("affine", F32, affine_in(), **kw))
    assert r.errnos[2] == INVALID_ARGUMENT
    assert any(why in line for line in logs)


def test_too_small_output_buffer_reports_needed_size(
    proxy: Adapter, declared: DeclaredModels
) -> None:
    s = one_input("affine", F32, affine_in())
    small, written = s.out(8), s.out()
    s.call("get_output", 0, 0, small, 8, written)
    r, _ = run(proxy, declared, s)
    assert r.errnos[-1] == TOO_LARGE
    assert r.u32(written) == 16
    assert r.raw(small, 8) == b"\0" * 8  # nothing partial written


@pytest.mark.parametrize(
    "call",
    [
        ("init_execution_context", 99, "OUT"),
        ("init_execution_context", -1, "OUT"),
        ("set_input", 42, 0, "TENSOR"),
        ("compute", 42),
        ("get_output", 42, 0, "OUT", 4, "OUT"),
        ("unload", 5),
        ("finalize_execution_context", 9),
    ],
)
def test_handles_from_nowhere(
    proxy: Adapter, declared: DeclaredModels, call: Sequence[Any]
) -> None:
    s = Script()
    graph_named(s, "affine")
    args = [
        s.out()
        if a == "OUT"
        else s.tensor([1, 4], F32, affine_in().tobytes())
        if a == "TENSOR"
        else a
        for a in call[1:]
    ]
    s.call(call[0], *args)
    r, logs = run(proxy, declared, s)
    assert r.errnos == [OK, OK, INVALID_ARGUMENT]
    assert any("no graph" in line or "no execution context" in line for line in logs)


def test_use_after_unload_and_finalize(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    graph_named(s, "affine")
    s.call("finalize_execution_context", 0)
    s.call("compute", 0)
    s.call("unload", 0)
    s.call("init_execution_context", 0, s.out())
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK, OK, OK, INVALID_ARGUMENT, OK, INVALID_ARGUMENT]


def test_order_and_index_errors(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    graph_named(s, "affine")
    s.call("compute", 0)  # input not set
    s.call("get_output", 0, 0, s.out(16), 16, s.out())  # before compute
    s.call("set_input", 0, 3, s.tensor([1, 4], F32, affine_in().tobytes()))  # no input 3
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
    s.call("compute", 0)
    s.call("get_output", 0, 9, s.out(16), 16, s.out())  # no output 9
    r, _ = run(proxy, declared, s)
    assert r.errnos == [
        OK,
        OK,
        INVALID_ARGUMENT,
        INVALID_ARGUMENT,
        INVALID_ARGUMENT,
        OK,
        OK,
        INVALID_ARGUMENT,
    ]


def test_bad_pointers_are_invalid_argument(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    s.call("load_by_name", FAR, 6, s.out())  # name
    s.call("load_by_name", s.blob(b"affine"), 6, FAR)  # graph out
    s.call("load", FAR, 1, 1, 0, s.out())  # builders
    graph_named(s, "affine")
    s.call("init_execution_context", 0, FAR)
    s.call("set_input", 0, 0, FAR)  # tensor record
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, affine_in().tobytes()))
    s.call("compute", 0)
    s.call("get_output", 0, 0, FAR, 16, s.out())  # buffer
    s.call("get_output", 0, 0, s.out(16), 16, FAR)  # written
    r, logs = run(proxy, declared, s)
    bad = INVALID_ARGUMENT
    assert r.errnos == [bad, bad, bad, OK, OK, bad, bad, OK, OK, bad, bad]
    assert sum("bad pointer" in line for line in logs) == 7


class Exploding:
    name = "boom"
    inputs = (TensorSpec("x", "FP32", (-1, 4)),)
    outputs = (TensorSpec("y", "FP32", (-1, 4)),)

    def infer(
        self, inputs: Sequence[npt.NDArray[Any]], *, deadline: float | None = None
    ) -> list[npt.NDArray[Any]]:
        raise RuntimeError("backend on fire")


class OneModel:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def by_name(self, name: str) -> Any:
        return self.handle if name == "boom" else None

    def from_bytes(self, data: bytes, encoding: str, target: str) -> Any:
        return None


def test_backend_failure_is_runtime_error(proxy: Adapter) -> None:
    r, logs = run(proxy, OneModel(Exploding()), one_input("boom", F32, affine_in()))
    assert r.errnos == [OK, OK, OK, RUNTIME_ERROR]
    assert any("backend on fire" in line for line in logs)


class DeadlineProbe:
    """Records the deadline ``compute`` hands to the model."""

    name = "boom"
    inputs = Exploding.inputs
    outputs = Exploding.outputs

    def __init__(self) -> None:
        self.deadlines: list[float | None] = []

    def infer(
        self, inputs: Sequence[npt.NDArray[Any]], *, deadline: float | None = None
    ) -> list[npt.NDArray[Any]]:
        self.deadlines.append(deadline)
        return [inputs[0]]


def test_compute_passes_the_request_deadline_to_the_model(proxy: Adapter) -> None:
    probe = DeadlineProbe()
    script = one_input("boom", F32, affine_in())
    before = time.monotonic()
    res = proxy.run(script.payload(), {}, OneModel(probe), GuestLimits(deadline_s=5.0))
    assert script.result(res.output).errnos == [OK] * 4
    (deadline,) = probe.deadlines
    assert deadline is not None
    assert before + 4 < deadline <= time.monotonic() + 5


def test_legacy_wat_guest_runs_unmodified(
    engine: Any, wat_guest: Any, declared: DeclaredModels
) -> None:
    adapter = engine.compile(wat_guest("nn_legacy"), name="nn_legacy")
    res = adapter.run(bytes([2, 4, 6, 8]), {}, declared, GuestLimits())
    assert res.status == 0
    assert struct.unpack("<4f", res.output) == (1.0, 2.0, 3.0, 4.0)


def test_missing_memory_errno() -> None:
    import wasmtime  # noqa: PLC0415

    from wasmgate.sandbox import GuestRunner, GuestTrap  # noqa: PLC0415

    # No memory export (so no WASI either): trap iff load_by_name said missing_memory (3).
    wat = """(module
      (import "wasi_ephemeral_nn" "load_by_name" (func $l (param i32 i32 i32) (result i32)))
      (func (export "_start")
        (if (i32.eq (call $l (i32.const 0) (i32.const 0) (i32.const 0)) (i32.const 3))
          (then unreachable))))"""
    with pytest.raises(GuestTrap, match="unreachable"):
        GuestRunner(DeclaredModels({})).run(bytes(wasmtime.wat2wasm(wat)))


def session_with_context(max_handles: int = 256, max_contexts: int = 16) -> tuple[Any, list[str]]:
    from wasmgate.sandbox.memory import GuestMemory  # noqa: PLC0415
    from wasmgate.sandbox.wasi_nn import NnSession  # noqa: PLC0415

    logs: list[str] = []
    provider = DeclaredModels({})
    provider.named["affine"] = load_model(model_bytes()["affine"], "affine")
    session = NnSession(provider, logs.append, max_handles, max_contexts)
    buf = (ctypes.c_ubyte * 4096)()
    mem = GuestMemory(ctypes.addressof(buf), 4096)
    mem.write(0, b"affine")
    session.load_by_name(mem, 0, 6, 8)
    session.init_execution_context(mem, 0, 12)
    return (session, mem, buf), logs


def test_compute_after_the_deadline_is_busy() -> None:
    from wasmgate.sandbox.wasi_nn import NnError  # noqa: PLC0415

    (session, mem, _buf), _ = session_with_context()
    dims = struct.pack("<2I", 1, 4)
    mem.write(16, dims + affine_in().tobytes())
    mem.write(48, struct.pack("<IIB3xII", 16, 2, 1, 24, 16))
    session.set_input(mem, 0, 0, 48)
    session.deadline = time.monotonic() - 1
    with pytest.raises(NnError, match="deadline") as info:
        session.compute(0)
    assert info.value.errno == 4  # busy
    assert session.infer_s == 0


def test_handle_count_is_bounded() -> None:
    from wasmgate.sandbox.wasi_nn import NnError  # noqa: PLC0415

    (session, mem, _buf), _ = session_with_context(max_contexts=2)
    session.init_execution_context(mem, 0, 12)
    with pytest.raises(NnError, match="more than 2 execution contexts") as info:
        session.init_execution_context(mem, 0, 12)
    assert info.value.errno == TOO_LARGE
    session.finalize_execution_context(1)
    session.init_execution_context(mem, 0, 12)  # a finalized context frees its slot


def _big_input(mem: Any, rows: int) -> int:
    """A [rows, 4] FP32 tensor record at 48 (dims at 16, data at 64); returns its bytes."""
    nbytes = rows * 16
    mem.write(16, struct.pack("<2I", rows, 4))
    mem.write(64, np.ones((rows, 4), np.float32).tobytes())
    mem.write(48, struct.pack("<IIB3xII", 16, 2, 1, 64, nbytes))
    return nbytes


def test_host_bytes_pinned_by_contexts_are_bounded() -> None:
    """Many contexts with big inputs: the bytes they pin stay within the request's budget."""
    from wasmgate.sandbox.wasi_nn import NnError  # noqa: PLC0415

    (session, mem, _buf), _ = session_with_context(max_contexts=16)
    nbytes = _big_input(mem, 60)  # 960 bytes each
    session.host_budget = 3 * nbytes + 100
    for _ in range(3):
        session.init_execution_context(mem, 0, 12)
    for ctx in range(3):
        session.set_input(mem, ctx, 0, 48)
    assert session.host_bytes == 3 * nbytes
    with pytest.raises(NnError, match="above the request's memory budget") as info:
        session.set_input(mem, 3, 0, 48)
    assert info.value.errno == TOO_LARGE
    assert session.host_bytes == 3 * nbytes  # nothing was copied for the refused input
    session.set_input(mem, 0, 0, 48)  # replacing an input is charged once
    assert session.host_bytes == 3 * nbytes
    with pytest.raises(NnError, match="output of 960 bytes") as info:
        session.compute(0)  # its output would pass the budget too: dropped
    assert info.value.errno == TOO_LARGE
    assert session.host_bytes == 3 * nbytes
    session.finalize_execution_context(1)
    session.finalize_execution_context(2)
    session.compute(0)
    assert session.host_bytes == 2 * nbytes  # input + output of context 0
    session.set_input(mem, 3, 0, 48)
    assert session.host_bytes == 3 * nbytes


def fused(s: Script, shape: Sequence[int], raw: bytes, cap: int = 16, **kw: Any) -> tuple[Ptr, Ptr]:
    """``wasmgate.nn_infer_f32`` on graph 0 (loaded by name first); (buffer, written)."""
    g = s.out()
    s.call("load_by_name", s.blob(b"affine"), 6, g)
    buf, written = s.out(16), s.out()
    args: dict[str, int | Ptr] = {
        "graph": 0,
        "dims": s.blob(struct.pack(f"<{len(shape)}I", *shape)),
        "rank": len(shape),
        "data": s.blob(raw),
        "len": len(raw),
        "buf": buf,
        "cap": cap,
        "written": written,
    }
    args.update(kw)
    s.call("nn_infer_f32", *args.values())
    return buf, written


def test_fused_inference_is_the_four_calls_in_one(proxy: Adapter, declared: DeclaredModels) -> None:
    s = Script()
    buf, written = fused(s, [1, 4], affine_in().tobytes())
    r, _ = run(proxy, declared, s)
    assert r.errnos == [OK, OK]
    assert r.u32(written) == 16
    assert np.frombuffer(r.raw(buf, 16), "<f4").tolist() == (affine_in() * 2 + 1).ravel().tolist()


@pytest.mark.parametrize(
    ("dims", "kw", "errno", "why"),
    [
        ([1, 5], {}, INVALID_ARGUMENT, "do not fit model shape"),
        ([1, 4], {"len": 12}, INVALID_ARGUMENT, "dims need 16"),
        ([1, 4], {"rank": 17}, INVALID_ARGUMENT, "rank 17 outside 0..16"),
        ([1, 4], {"rank": -1}, INVALID_ARGUMENT, "rank -1 outside 0..16"),
        ([1, 4], {"graph": 7}, INVALID_ARGUMENT, "no graph with handle 7"),
        ([1, 4], {"data": FAR}, INVALID_ARGUMENT, "bad pointer"),
        ([1, 4], {"dims": FAR}, INVALID_ARGUMENT, "bad pointer"),
        ([1, 4], {"buf": FAR}, INVALID_ARGUMENT, "bad pointer"),
        ([1, 4], {"written": FAR}, INVALID_ARGUMENT, "bad pointer"),
        ([1, 4], {"cap": 8}, TOO_LARGE, "output needs 16"),
    ],
)
def test_fused_inference_refuses_what_the_four_calls_refuse(  # noqa: PLR0917 - parametrized
    proxy: Adapter,
    declared: DeclaredModels,
    dims: list[int],
    kw: dict[str, Any],
    errno: int,
    why: str,
) -> None:
    s = Script()
    buf, written = fused(s, dims, affine_in().tobytes(), **kw)
    r, logs = run(proxy, declared, s)
    assert r.errnos == [OK, errno]
    assert any(why in line for line in logs), logs
    if errno == TOO_LARGE:
        assert r.u32(written) == 16
        assert r.raw(buf, 8) == b"\0" * 8  # nothing partial written


def test_fused_inference_of_a_failing_backend_is_runtime_error(proxy: Adapter) -> None:
    s = Script()
    g, written = s.out(), s.out()
    s.call("load_by_name", s.blob(b"boom"), 4, g)
    raw = affine_in().tobytes()
    s.call("nn_infer_f32", 0, s.blob(struct.pack("<2I", 1, 4)), 2, s.blob(raw), len(raw),
           s.out(16), 16, written)  # fmt: skip
    r, logs = run(proxy, OneModel(Exploding()), s)
    assert r.errnos == [OK, RUNTIME_ERROR]
    assert any("backend on fire" in line for line in logs)


class Labeller:
    """FP32 in, a string tensor out (object array of str, as ONNX Runtime gives it)."""

    name = "boom"
    inputs = (TensorSpec("x", "FP32", (-1, 4)),)
    outputs = (TensorSpec("label", "BYTES", (-1,)),)

    def infer(
        self, inputs: Sequence[npt.NDArray[Any]], *, deadline: float | None = None
    ) -> list[npt.NDArray[Any]]:
        return [np.array(["cat"] * len(inputs[0]), dtype=np.object_)]


class Reader:
    """A string tensor in: wasi-nn has no type a guest could send it as."""

    name = "boom"
    inputs = (TensorSpec("text", "BYTES", (-1,)),)
    outputs = (TensorSpec("y", "FP32", (-1,)),)

    def infer(
        self, inputs: Sequence[npt.NDArray[Any]], *, deadline: float | None = None
    ) -> list[npt.NDArray[Any]]:
        raise AssertionError("never run")


def test_a_string_output_is_refused_not_copied(proxy: Adapter) -> None:
    # An object array's bytes are pointers into the host: none may reach the guest.
    s = one_input("boom", F32, affine_in())
    buf, written = s.out(64), s.out()
    s.call("get_output", 0, 0, buf, 64, written)
    r, logs = run(proxy, OneModel(Labeller()), s)
    assert r.errnos == [OK, OK, OK, OK, INVALID_ARGUMENT]
    assert r.raw(buf, 64) == bytes(64)
    assert any("wasi-nn has no string tensor type" in line for line in logs), logs


@pytest.mark.parametrize("ty", [F32, CUR_U8, I64])
def test_a_string_input_is_refused_whatever_the_type(proxy: Adapter, ty: int) -> None:
    r, logs = run(proxy, OneModel(Reader()), one_input("boom", ty, U8.ravel()))
    assert r.errnos[2] == INVALID_ARGUMENT
    assert any("string tensor (BYTES)" in line for line in logs), logs

"""Test helpers: tiny ONNX models loaded by the real backend, a test ModelProvider, the
nn_proxy script builder."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import wasmtime
from onnx import TensorProto, helper

from tests.fixtures.backends import load_model
from wasmgate.sandbox.models import ModelHandle

GUESTS = Path(__file__).parent / "guests"


def _model(graph: onnx.GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def affine_onnx() -> bytes:
    """y = x * 2 + 1, FP32 [-1, 4] -> FP32 [-1, 4]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["y"]),
    ]
    return _model(helper.make_graph(nodes, "affine", [x], [y], [two, one]))


def cast_onnx(elem: int) -> bytes:
    """y = float(x) * 0.5 for an input of element type ``elem``, shape [1, 4]."""
    x = helper.make_tensor_value_info("x", elem, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [
        helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "half"], ["y"]),
    ]
    return _model(helper.make_graph(nodes, "cast", [x], [y], [half]))


MODEL_BYTES: dict[str, bytes] = {}


def model_bytes() -> dict[str, bytes]:
    """Every test model by name (built once per process)."""
    if not MODEL_BYTES:
        MODEL_BYTES.update(
            affine=affine_onnx(),
            u8=cast_onnx(TensorProto.UINT8),
            i8=cast_onnx(TensorProto.INT8),
            i32=cast_onnx(TensorProto.INT32),
            f64=cast_onnx(TensorProto.DOUBLE),
            i64=cast_onnx(TensorProto.INT64),
        )
    return MODEL_BYTES


class DeclaredModels:
    """A daemon-like provider: named models, raw bytes only if their hash is declared."""

    def __init__(self, named: Mapping[str, bytes]) -> None:
        self.named: dict[str, ModelHandle] = {n: load_model(b, n) for n, b in named.items()}
        self._by_hash = {hashlib.sha256(b).hexdigest(): n for n, b in named.items()}
        self.from_bytes_calls: list[tuple[str, str]] = []

    def by_name(self, name: str) -> ModelHandle | None:
        return self.named.get(name)

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        self.from_bytes_calls.append((encoding, target))
        name = self._by_hash.get(hashlib.sha256(data).hexdigest())
        return None if name is None else self.named[name]


@dataclass(frozen=True)
class Ptr:
    """An offset into the script's data area (relocated to an absolute pointer)."""

    offset: int


FN = {
    "load": 0,
    "load_by_name": 1,
    "init_execution_context": 2,
    "set_input": 3,
    "compute": 4,
    "get_output": 5,
    "unload": 6,
    "finalize_execution_context": 7,
    "nn_infer_f32": 8,
    "load_by_name_with_config": 9,
    "compute_single": 10,
    "get_output_single": 11,
    "fini_single": 12,
}


@dataclass
class Script:
    """Builds an nn_proxy payload: wasi-nn calls with immediate or payload-relative args."""

    ops: list[tuple[int, Sequence[int | Ptr]]] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)
    relocs: list[int] = field(default_factory=list)  # data offsets holding pointers

    def blob(self, raw: bytes) -> Ptr:
        """Place ``raw`` (8-aligned) in the data area."""
        self.data.extend(b"\0" * (-len(self.data) % 8))
        ptr = Ptr(len(self.data))
        self.data.extend(raw)
        return ptr

    def out(self, size: int = 4) -> Ptr:
        """A zeroed out-value slot."""
        return self.blob(b"\0" * size)

    def tensor(
        self,
        dims: Sequence[int],
        ty: int,
        raw: bytes,
        *,
        data_len: int | None = None,
        rank: int | None = None,
        abs_data: int | None = None,
        shared: Ptr | None = None,
    ) -> Ptr:
        """A 20-byte tensor record (its dims/data pointers relocated unless ``abs_data``).

        ``shared`` points the record at data already placed (``raw`` then only gives its
        length), so many records can share one big blob.
        """
        dims_ptr = self.blob(struct.pack(f"<{len(dims)}I", *dims))
        data_ptr = self.blob(raw) if shared is None else shared
        n = len(raw) if data_len is None else data_len
        data = data_ptr.offset if abs_data is None else abs_data
        rank = len(dims) if rank is None else rank
        rec = self.blob(struct.pack("<IIB3xII", dims_ptr.offset, rank, ty, data, n))
        self.relocs += [rec.offset] if abs_data is not None else [rec.offset, rec.offset + 12]
        return rec

    def builders(self, *parts: bytes) -> Ptr:
        """A graph-builder array of ``{ptr, len}`` entries."""
        ptrs = [self.blob(p) for p in parts]
        arr = self.blob(
            b"".join(
                struct.pack("<II", p.offset, len(raw)) for p, raw in zip(ptrs, parts, strict=True)
            )
        )
        self.relocs += [arr.offset + 8 * i for i in range(len(parts))]
        return arr

    def call(self, fn: str, *args: int | Ptr) -> int:
        """Append a call; returns its index in the errno list."""
        self.ops.append((FN[fn], args))
        return len(self.ops) - 1

    def _header_len(self) -> int:
        n = 4 + 4 * len(self.relocs) + 4 + sum(8 + 16 * len(a) for _, a in self.ops)
        return n + (-n % 8)

    def payload(self) -> bytes:
        base = self._header_len()
        words = [len(self.relocs), *(base + r for r in self.relocs), len(self.ops)]
        for fn, args in self.ops:
            words += [fn, len(args)]
            for a in args:
                words += [1, base + a.offset] if isinstance(a, Ptr) else [0, a & 0xFFFF_FFFF]
        head = struct.pack(f"<{len(words)}I", *words)
        data = bytearray(self.data)
        for r in self.relocs:  # data-relative -> payload-relative; the guest adds its base
            struct.pack_into("<I", data, r, struct.unpack_from("<I", data, r)[0] + base)
        return head + b"\0" * (base - len(head)) + bytes(data)

    def result(self, output: bytes) -> Result:
        n = len(self.ops)
        errnos = list(struct.unpack(f"<{n}I", output[: 4 * n]))
        return Result(errnos, output[4 * n + self._header_len() :])


@dataclass
class Result:
    """What nn_proxy returned: one errno per call, and the data area as the host left it."""

    errnos: list[int]
    data: bytes

    def u32(self, ptr: Ptr) -> int:
        return int(struct.unpack_from("<I", self.data, ptr.offset)[0])

    def raw(self, ptr: Ptr, n: int) -> bytes:
        return self.data[ptr.offset : ptr.offset + n]


def compile_bomb(locals_: int = 2000, depth: int = 900) -> bytes:
    """~24 KiB of valid wasm that cranelift compiles for minutes with ever more memory.

    One function: ``depth`` nested loops, each updating two of ``locals_`` i32 locals from
    others, so every local is live across every loop header (register allocation and SSA
    construction grow with locals x depth). ``locals_=1000, depth=600`` (19 KiB) already
    took 36 s on a 2-core machine with the daemon's engine settings.
    """

    def var(level: int, j: int) -> int:
        return (2 * level + j) % locals_

    body = "".join(
        "(loop "
        + "".join(
            f"(local.set {var(k, j)} (i32.add (local.get {var(k, j + 1)}) "
            f"(local.get {var(k + 1, j)})))"
            for j in range(2)
        )
        for k in range(depth)
    )
    wat = f"(module (func (param i32) (local{' i32' * locals_}) {body}"
    wat += "(br_if 0 (local.get 0)))" * depth + "))"
    return bytes(wasmtime.wat2wasm(wat))

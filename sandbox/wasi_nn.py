"""Host functions of ``wasi_ephemeral_nn`` (wasi-nn witx preview1, plus WasmEdge extras).

Invariants:
- Exact core ABI (``docs/design.md``, the sandbox contract): all-i32 params, i32 errno result,
  u32 little-endian out-values, 8-byte graph-builder entries, the 20-byte tensor record
  with the tensor type read as *one byte* at offset 8.
- Handles are per instance (``NnSession``), counted from 0; a handle from another instance
  or from nowhere is ``invalid_argument``.
- Every guest pointer is bounds-checked before use (bad pointer: ``invalid_argument``); no
  host function ever raises into wasm (wasmtime-py keeps the raised exception in a process
  global, which is unsafe with concurrent guests): failures become errno values and are
  described in the request log.
- The declared tensor type is accepted under either numbering (current witx or pre-2023
  legacy) only if it names the model's real input type, and the byte length must equal
  ``prod(dims) * itemsize``. INT8 model inputs also accept a declared u8 (witx has no i8).
- A too-small output buffer returns ``too_large`` and writes the needed size (WasmEdge).
- Host memory a guest makes us hold is bounded: at most ``max_contexts`` execution contexts
  per instance, and the input and output tensors all contexts hold are charged to
  ``host_budget`` (the request's memory limit) before they are copied; beyond it the call
  returns ``too_large`` and copies nothing. Without this, one request could pin
  contexts x tensor size of host memory (14 x 48 MiB from a 200 MiB guest).
- Only models the ``ModelProvider`` hands out can run: the sandbox never loads bytes itself.
- WasmEdge's single-step calls work on every model: a model has exactly one step, so the first
  ``compute_single`` of a context runs it and the next returns ``END_OF_SEQUENCE`` (100) until
  ``fini_single`` or a new ``set_input`` starts a new sequence. A WasmEdge streaming loop
  (``while compute_single == 0: get_output_single``) therefore ends after one pass. WasmEdge
  itself answers ``invalid_argument`` for these on non-GGML backends (documented difference).
- ``load_by_name_with_config``'s config must be empty or a strict JSON object of at most
  64 KiB (no duplicate keys, NaN or Infinity: else ``invalid_argument``); its keys are backend
  options of WasmEdge's GGML backend and are logged as ignored. As in WasmEdge, a name already
  loaded returns its graph whatever the config.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from wasmgate.sandbox.memory import GuestMemory
from wasmgate.sandbox.models import ModelHandle
from wasmgate.sandbox.spans import span
from wasmgate.sandbox.wasi_nn_abi import (
    ENCODINGS,
    F32,
    STRING_TENSOR,
    TARGETS,
    TENSOR,
    UNSUPPORTED_ENCODINGS,
    NnErrno,
    NnError,
    checked,
    encoding_of,
)
from wasmgate.sandbox.wasi_nn_handles import NnHandles
from wasmgate.sandbox.wasi_nn_link import (
    HOST_NN_FUNCTIONS,
    NN_FUNCTIONS,
    NN_MODULE,
    define_wasi_nn,
)
from wasmgate.signing.envelope import EnvelopeFormatError, loads_strict

__all__ = [
    "ENCODINGS",
    "HOST_NN_FUNCTIONS",
    "NN_FUNCTIONS",
    "NN_MODULE",
    "UNSUPPORTED_ENCODINGS",
    "NnErrno",
    "NnError",
    "NnSession",
    "define_wasi_nn",
]

_E = NnErrno
_MAX_CONFIG = 64 * 1024


class NnSession(NnHandles):
    """wasi-nn state of one guest instance: graph and execution-context handles.

    ``provider`` may be swapped between requests (pooled instances); ``log`` receives a line
    for every failed call; ``infer_s`` accumulates time spent in ``ModelHandle.infer``;
    ``calls`` counts the runs started per model name (what the status page shows as a
    model's calls by adapters). The session belongs to one instance, used by one thread at a
    time, so the count is a plain dict increment.
    """

    def load(  # noqa: PLR0917 - wasm ABI argument order
        self, mem: GuestMemory, builders: int, count: int, enc: int, tgt: int, out: int
    ) -> None:
        """``load``: build a graph from raw model bytes the provider accepts."""
        mem.check(out, 4)
        encoding = encoding_of(enc)
        if tgt not in TARGETS:
            raise NnError(_E.INVALID_ARGUMENT, f"unknown execution target {tgt}")
        if count != 1:
            raise NnError(_E.INVALID_ARGUMENT, f"expected 1 graph builder, got {count}")
        data = mem.read(mem.u32(builders), mem.u32(builders + 4))
        if encoding == "autodetect":
            encoding = "tensorflowlite" if data[4:8] == b"TFL3" else "onnx"
        handle = self._provide(lambda: self.provider.from_bytes(data, encoding, TARGETS[tgt]))
        if handle is None:
            raise NnError(_E.NOT_FOUND, "model bytes are not a model this guest may load")
        mem.put_u32(out, self._add_graph(handle))

    def load_by_name_with_config(  # noqa: PLR0917 - wasm ABI argument order
        self, mem: GuestMemory, name_ptr: int, name_len: int, cfg_ptr: int, cfg_len: int, out: int
    ) -> None:
        """``load_by_name_with_config`` (WasmEdge): ``load_by_name`` after checking the config."""
        mem.check(out, 4)
        if cfg_len > _MAX_CONFIG:
            raise NnError(_E.TOO_LARGE, f"config of {cfg_len} bytes, above {_MAX_CONFIG}")
        raw = mem.read(cfg_ptr, cfg_len)
        try:
            config = loads_strict(raw) if raw.strip() else {}
        except EnvelopeFormatError as e:
            raise NnError(_E.INVALID_ARGUMENT, f"config: {e}") from e
        if config:
            self.log(f"wasi-nn load_by_name_with_config: ignored {sorted(config)[:8]}")
        self.load_by_name(mem, name_ptr, name_len, out)

    def load_by_name(self, mem: GuestMemory, name_ptr: int, name_len: int, out: int) -> None:
        """``load_by_name``: a named model; the same name gives the same handle."""
        mem.check(out, 4)
        try:
            name = mem.read(name_ptr, name_len).decode()
        except UnicodeDecodeError as e:
            raise NnError(_E.INVALID_ARGUMENT, "model name is not UTF-8") from e
        if name in self._by_name:
            mem.put_u32(out, self._by_name[name])
            return
        handle = self._provide(lambda: self.provider.by_name(name))
        if handle is None:
            raise NnError(_E.NOT_FOUND, f"no model named {name!r}")
        self._by_name[name] = graph = self._add_graph(handle)
        mem.put_u32(out, graph)

    def init_execution_context(self, mem: GuestMemory, graph: int, out: int) -> None:
        """``init_execution_context``: a new context for ``graph``."""
        mem.check(out, 4)
        mem.put_u32(out, self._open_context(self._graph(graph)))

    def set_input(self, mem: GuestMemory, ctx: int, index: int, tensor_ptr: int) -> None:
        """``set_input``: copy one input tensor out of guest memory after checking it."""
        ec = self._ctx(ctx)
        specs = ec.graph.inputs
        if not 0 <= index < len(specs):
            raise NnError(_E.INVALID_ARGUMENT, f"input index {index} out of range")
        fields = TENSOR.unpack(mem.read(tensor_ptr, 20))
        dims, dtype = checked(mem, specs[index], fields)
        old = ec.inputs.pop(index, None)
        self._stepped.discard(ctx)  # new input, new sequence
        self._release(ec.outputs)
        ec.outputs = None
        self._release([] if old is None else [old])
        ec.inputs[index] = self._copy_in(mem, dims, dtype, fields[3], fields[4])

    def _copy_in(
        self, mem: GuestMemory, dims: tuple[int, ...], dtype: np.dtype[Any], ptr: int, size: int
    ) -> npt.NDArray[Any]:
        self._charge(size, "input")
        raw = mem.read(ptr, size)
        return np.frombuffer(raw, dtype=dtype).reshape(dims)  # dtype: little-endian

    def compute(self, ctx: int) -> None:
        """``compute``: ``ModelHandle.infer`` with the request's deadline (time: ``infer_s``)."""
        ec = self._ctx(ctx)
        missing = [i for i in range(len(ec.graph.inputs)) if i not in ec.inputs]
        if missing:
            raise NnError(_E.INVALID_ARGUMENT, f"inputs {missing} were not set")
        inputs = [ec.inputs[i] for i in range(len(ec.graph.inputs))]
        self._release(ec.outputs)
        ec.outputs = None
        ec.outputs = self._infer(ec.graph, inputs)

    def _infer(self, graph: ModelHandle, inputs: list[npt.NDArray[Any]]) -> list[Any]:
        """One run with the request's deadline; its outputs charged to the host budget."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise NnError(_E.BUSY, "request deadline already passed")
        calls = self.calls
        calls[graph.name] = calls.get(graph.name, 0) + 1
        start = time.perf_counter()
        try:  # the guest's deadline goes with the run: it stops (or never starts) past it
            with span("wasi-nn compute", {"wasmgate.model": graph.name}):
                outputs = graph.infer(inputs, deadline=self.deadline)
        except Exception as e:
            raise NnError(_E.RUNTIME_ERROR, f"inference failed: {e}") from e
        finally:
            self.infer_s += time.perf_counter() - start
        self._charge(sum(a.nbytes for a in outputs), "output")  # dropped if over the budget
        return outputs

    def infer_f32(  # noqa: PLR0917 - wasm ABI argument order
        self,
        mem: GuestMemory,
        graph: int,
        dims_ptr: int,
        rank: int,
        data_ptr: int,
        data_len: int,
        buf: int,
        cap: int,
        out: int,
    ) -> int:
        """``wasmgate.nn_infer_f32`` (the SDK's ``wg_nn_infer_f32``): one FP32 input 0 in,
        output 0's bytes out, in one host crossing instead of four. The same checks, host
        budget, deadline and errnos as ``init_execution_context`` + ``set_input`` +
        ``compute`` + ``get_output`` on a context used once; no handle is left behind."""
        model = self._graph(graph)
        mem.check(out, 4)
        if len(model.inputs) != 1:
            raise NnError(_E.INVALID_ARGUMENT, f"nn_infer_f32 needs one input, model has "
                          f"{len(model.inputs)}")  # fmt: skip
        fields = (dims_ptr, rank, F32, data_ptr, data_len)
        dims, dtype = checked(mem, model.inputs[0], fields)
        x = self._copy_in(mem, dims, dtype, data_ptr, data_len)
        try:
            outputs = self._infer(model, [x])
        finally:
            self.host_bytes -= x.nbytes
        try:
            return self._copy_out(mem, outputs[0], buf, cap, out)
        finally:
            self._release(outputs)

    def get_output(  # noqa: PLR0917 - wasm ABI argument order
        self, mem: GuestMemory, ctx: int, index: int, buf: int, cap: int, out: int
    ) -> int:
        """``get_output``: copy an output's raw bytes; too small → ``too_large`` + size."""
        ec = self._ctx(ctx)
        mem.check(out, 4)
        if ec.outputs is None:
            raise NnError(_E.INVALID_ARGUMENT, "get_output before compute")
        if not 0 <= index < len(ec.outputs):
            raise NnError(_E.INVALID_ARGUMENT, f"output index {index} out of range")
        return self._copy_out(mem, ec.outputs[index], buf, cap, out)

    def _copy_out(
        self, mem: GuestMemory, arr: npt.NDArray[Any], buf: int, cap: int, out: int
    ) -> int:
        if arr.dtype.kind in "OSU":  # an object array's bytes are pointers: never copied
            raise NnError(_E.INVALID_ARGUMENT, STRING_TENSOR)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        if arr.nbytes > cap & 0xFFFF_FFFF:
            mem.put_u32(out, arr.nbytes)
            self.log(f"wasi-nn get_output: buffer of {cap} bytes, output needs {arr.nbytes}")
            return _E.TOO_LARGE
        mem.write_array(buf, arr)
        mem.put_u32(out, arr.nbytes)
        return _E.SUCCESS

    def compute_single(self, ctx: int) -> int:
        """``compute_single`` (WasmEdge): the one step of the model, then end of sequence."""
        self._ctx(ctx)
        if ctx in self._stepped:
            return _E.END_OF_SEQUENCE
        self.compute(ctx)
        self._stepped.add(ctx)
        return _E.SUCCESS

    def get_output_single(  # noqa: PLR0917 - wasm ABI argument order
        self, mem: GuestMemory, ctx: int, index: int, buf: int, cap: int, out: int
    ) -> int:
        """``get_output_single`` (WasmEdge): the output of the last step (``get_output``)."""
        return self.get_output(mem, ctx, index, buf, cap, out)

    def fini_single(self, ctx: int) -> None:
        """``fini_single`` (WasmEdge): end the sequence; the context stays usable."""
        ec = self._ctx(ctx)
        self._release(ec.outputs)
        ec.outputs = None
        self._stepped.discard(ctx)

    def unload(self, graph: int) -> None:
        """``unload`` (WasmEdge): forget a graph handle."""
        self._graph(graph)
        del self._graphs[graph]
        self._by_name = {k: v for k, v in self._by_name.items() if v != graph}

    def finalize_execution_context(self, ctx: int) -> None:
        """``finalize_execution_context`` (WasmEdge): forget a context handle."""
        ec = self._ctx(ctx)
        self._release([*ec.inputs.values(), *(ec.outputs or [])])
        del self._contexts[ctx]
        self._stepped.discard(ctx)

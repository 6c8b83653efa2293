"""Tiny real models for backend tests: ONNX via onnx.helper, TFLite via LiteRT's schema."""

from __future__ import annotations

import flatbuffers
import numpy as np
import numpy.typing as npt
import onnx
from ai_edge_litert import schema_py_generated as tfl
from onnx import TensorProto, helper, numpy_helper

F32 = npt.NDArray[np.float32]
RNG_SEED = 7


def weights(n_in: int = 16, n_out: int = 8) -> tuple[F32, F32]:
    rng = np.random.default_rng(RNG_SEED)
    w = rng.normal(0, 0.5, (n_in, n_out)).astype(np.float32)
    b = rng.normal(0, 0.1, (n_out,)).astype(np.float32)
    return w, b


def mlp_reference(x: F32) -> F32:
    w, b = weights()
    out: F32 = np.maximum(x @ w + b, 0).astype(np.float32)
    return out


def mlp_onnx(batch: int | str = "N", *, opset: int = 17) -> bytes:
    """y = relu(x @ W + b), x: [batch, 16] float32 -> y: [batch, 8]."""
    w, b = weights()
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "B"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return bytes(model.SerializeToString())


def seq_onnx() -> bytes:
    """y = x * 2 with x: [N, T] (two dynamic dims, for batcher shape grouping)."""
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T"])],
        [two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def bf16_relu_onnx() -> bytes:
    """A bf16-typed Relu: the CPU EP has no kernel for it (NOT_IMPLEMENTED at load)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def external_data_onnx() -> bytes:
    """The MLP with W stored as external data pointing at a file name."""
    model = onnx.load_model_from_string(mlp_onnx())
    for init in model.graph.initializer:
        if init.name == "W":
            init.ClearField("raw_data")
            init.ClearField("float_data")
            init.data_location = TensorProto.EXTERNAL
            entry = init.external_data.add()
            entry.key, entry.value = "location", "weights.bin"
    return bytes(model.SerializeToString())


def int8_dynamic_onnx(tmp_dir: str) -> bytes:
    """The MLP quantized with ORT's dynamic quantizer (MatMulInteger, S8 weights)."""
    from pathlib import Path  # noqa: PLC0415

    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415

    src, dst = Path(tmp_dir) / "fp32.onnx", Path(tmp_dir) / "int8.onnx"
    src.write_bytes(mlp_onnx())
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    return dst.read_bytes()


# -- TFLite ---------------------------------------------------------------------------------

IN_Q = (1 / 32, 0)  # input scale/zero point (covers [-4, 4))
OUT_Q = (1 / 16, -128)  # output scale/zero point (covers [0, 16) after ReLU)


def _tensor(
    name: str, shape: list[int], ttype: int, buffer: int = 0, quant: tuple[float, int] | None = None
) -> tfl.TensorT:
    t = tfl.TensorT()
    t.name, t.shape, t.type, t.buffer = name, shape, ttype, buffer
    if buffer == 0:
        t.shapeSignature = [-1, *shape[1:]]
    if quant is not None:
        q = tfl.QuantizationParametersT()
        q.scale, q.zeroPoint = [float(quant[0])], [int(quant[1])]
        t.quantization = q
    return t


def _buffer(array: npt.NDArray[np.generic]) -> tfl.BufferT:
    buf = tfl.BufferT()
    buf.data = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8)
    return buf


def fc_tflite(*, int8: bool) -> bytes:
    """FULLY_CONNECTED 16->8 with fused ReLU, dynamic batch; fp32 or full-integer int8."""
    w, b = weights()
    wt = w.T.copy()  # TFLite FC weights are [out, in]
    if int8:
        w_scale = float(np.abs(wt).max()) / 127
        qw = np.clip(np.round(wt / w_scale), -127, 127).astype(np.int8)
        qb = np.round(b / (IN_Q[0] * w_scale)).astype(np.int32)
        i8, i32 = tfl.TensorType.INT8, tfl.TensorType.INT32
        tensors = [
            _tensor("x", [1, 16], i8, quant=IN_Q),
            _tensor("w", [8, 16], i8, 1, (w_scale, 0)),
            _tensor("b", [8], i32, 2, (IN_Q[0] * w_scale, 0)),
            _tensor("y", [1, 8], i8, quant=OUT_Q),
        ]
        buffers = [tfl.BufferT(), _buffer(qw), _buffer(qb)]
    else:
        f32 = tfl.TensorType.FLOAT32
        tensors = [
            _tensor("x", [1, 16], f32),
            _tensor("w", [8, 16], f32, 1),
            _tensor("b", [8], f32, 2),
            _tensor("y", [1, 8], f32),
        ]
        buffers = [tfl.BufferT(), _buffer(wt), _buffer(b)]
    return _pack(tensors, buffers, version=4 if int8 else 1)


def affine_tflite(n: int = 4) -> bytes:
    """FULLY_CONNECTED n->n computing 2x + 1, fp32 (the fused ReLU is a no-op for x >= 0)."""
    f32 = tfl.TensorType.FLOAT32
    tensors = [
        _tensor("x", [1, n], f32),
        _tensor("w", [n, n], f32, 1),
        _tensor("b", [n], f32, 2),
        _tensor("y", [1, n], f32),
    ]
    two, one = 2 * np.eye(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    return _pack(tensors, [tfl.BufferT(), _buffer(two), _buffer(one)], version=1)


def _pack(tensors: list[tfl.TensorT], buffers: list[tfl.BufferT], version: int) -> bytes:
    code = tfl.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = tfl.BuiltinOperator.FULLY_CONNECTED
    code.version = version
    op = tfl.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1, 2], [3]
    op.builtinOptionsType = tfl.BuiltinOptions.FullyConnectedOptions
    op.builtinOptions = tfl.FullyConnectedOptionsT()
    op.builtinOptions.fusedActivationFunction = tfl.ActivationFunctionType.RELU
    sub = tfl.SubGraphT()
    sub.tensors, sub.operators, sub.inputs, sub.outputs = tensors, [op], [0], [3]
    model = tfl.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code], [sub], buffers
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def wide_onnx(seed: int = RNG_SEED) -> bytes:
    """y = relu(x @ W1 + b) @ W2, x: [N, 512] -> y: [N, 16]; W1 is 2 MiB (large enough to
    share its weights between processes), W2 32 KiB, b 4 KiB (stays inside the graph)."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.05, (512, 1024)).astype(np.float32)
    b = rng.normal(0, 0.1, (1024,)).astype(np.float32)
    w2 = rng.normal(0, 0.05, (1024, 16)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"]),
        helper.make_node("Add", ["h", "B"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "W2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "W1"), (b, "B"), (w2, "W2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())

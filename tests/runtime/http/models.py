"""Tiny ONNX models built with onnx.helper for the HTTP tests (no files, no downloads)."""

from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import TensorProto, helper

# Every V2 datatype the identity model passes through (BF16 has its own model: ORT's numpy
# bridge has no bfloat16, so it runs through OrtValues).
ELEMENT_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}


def _model(graph: onnx.GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def add_model() -> bytes:
    """``OUTPUT0 = INPUT0 + 1`` and ``OUTPUT1 = INPUT0 * 2`` on FP32 ``[-1, 4]``."""
    x = helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [None, 4])
    y0 = helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [None, 4])
    y1 = helper.make_tensor_value_info("OUTPUT1", TensorProto.FLOAT, [None, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Add", ["INPUT0", "one"], ["OUTPUT0"]),
        helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT1"]),
    ]
    return _model(helper.make_graph(nodes, "add", [x], [y0, y1], initializer=[one, two]))


def identity_model(types: Mapping[str, int] = ELEMENT_TYPES) -> bytes:
    """``out_<T> = in_<T>`` for every datatype ``T``, shape ``[-1, 3]``."""
    inputs, outputs, nodes = [], [], []
    for name, element in types.items():
        inputs.append(helper.make_tensor_value_info(f"in_{name}", element, [None, 3]))
        outputs.append(helper.make_tensor_value_info(f"out_{name}", element, [None, 3]))
        nodes.append(helper.make_node("Identity", [f"in_{name}"], [f"out_{name}"]))
    return _model(helper.make_graph(nodes, "identity", inputs, outputs))


def bf16_model() -> bytes:
    """``out_BF16 = in_BF16`` in bfloat16, shape ``[-1, 3]``."""
    return identity_model({"BF16": TensorProto.BFLOAT16})

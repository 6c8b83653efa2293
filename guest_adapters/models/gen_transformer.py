"""A small transformer-style (matmul-heavy) ONNX model and its labelled data, made
deterministically from a seed: the model INT4 weight-only quantization is measured on.

Shape: x [batch, 64] -> MatMul 64x256 -> Relu -> two residual blocks (MatMul 256x256 -> Relu
-> MatMul 256x256, Add) -> MatMul 256x10 -> y [batch, 10]. 98% of the weights are MatMul
weights, as in the feed-forward layers of a transformer. Labels are the fp32 model's own
argmax on Gaussian inputs, so "accuracy" of a quantized variant is its agreement with fp32.

A script like the other generators (``python gen_transformer.py --out DIR`` writes
``transformer-fp32.onnx`` and ``transformer-test.npz``); tests and bench load it by path.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # as the other generated models: loadable on older edge ORT builds
D_IN, D_MODEL, CLASSES = 64, 256, 10


def transformer_onnx(seed: int = 7) -> bytes:
    """The fp32 model's bytes (same seed, same bytes)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, rows: int, cols: int) -> str:
        w = rng.normal(0, 1 / np.sqrt(rows), (rows, cols)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name))
        return name

    def node(op: str, inputs: list[str], out: str) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out))
        return out

    h = node("Relu", [node("MatMul", ["x", weight("w_in", D_IN, D_MODEL)], "proj")], "h0")
    for i in (1, 2):
        a = node(
            "Relu", [node("MatMul", [h, weight(f"w{i}a", D_MODEL, D_MODEL)], f"m{i}a")], f"r{i}"
        )
        b = node("MatMul", [a, weight(f"w{i}b", D_MODEL, D_MODEL)], f"m{i}b")
        h = node("Add", [h, b], f"h{i}")
    node("MatMul", [h, weight("w_out", D_MODEL, CLASSES)], "y")
    graph = helper.make_graph(
        nodes, "transformer_ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D_IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", CLASSES])],
        initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def labelled(
    model: bytes, n: int = 512, seed: int = 11
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """``n`` Gaussian inputs and the fp32 model's class for each."""
    import onnxruntime as ort  # noqa: PLC0415 - only the data needs a session

    x = np.random.default_rng(seed).normal(size=(n, D_IN)).astype(np.float32)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    y = np.asarray(sess.run(None, {"x": x})[0]).argmax(axis=1)
    return x, y.astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    model = transformer_onnx()
    (out / "transformer-fp32.onnx").write_bytes(model)
    x, y = labelled(model)
    np.savez(out / "transformer-test.npz", x=x, y=y)


if __name__ == "__main__":
    main()

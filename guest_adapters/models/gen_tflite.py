"""Write the digits classifier as TFLite float32 and full-integer int8, without TensorFlow.

``python gen_tflite.py --dir DIR`` reads ``DIR/digits-fp32.onnx`` (weights),
``DIR/digits-train.npz`` (calibration) and ``DIR/digits-test.npz`` (evaluation), writes
``DIR/digits-{fp32,int8}.tflite`` with the flatbuffers object API bundled in ``ai-edge-litert``
(hardware.md §4.5) and prints their accuracy under LiteRT.

Graph: FULLY_CONNECTED(64→32, fused ReLU) → FULLY_CONNECTED(32→10) → SOFTMAX. The ONNX
``x / 16`` normalisation is folded into the first layer's weights, so both files take raw
pixels 0..16 like the ONNX model. Int8: per-tensor symmetric int8 weights, int32 biases,
asymmetric int8 activations from MinMax calibration on the training images; the input is int8
with scale 1, zero point 0 (pixel values are integers 0..16, so this is exact); the output is
int8 with scale 1/256, zero point -128 (what TFLite's int8 SOFTMAX requires).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import flatbuffers
import numpy as np
import numpy.typing as npt
import onnx
from ai_edge_litert import schema_py_generated as tfl
from ai_edge_litert.interpreter import Interpreter
from onnx import numpy_helper

F32 = npt.NDArray[np.float32]
Quant = tuple[float, int]  # (scale, zero_point)


class _Builder:
    """Accumulates buffers and tensors of one subgraph."""

    def __init__(self) -> None:
        self.buffers: list[tfl.BufferT] = [tfl.BufferT()]  # buffer 0: the empty sentinel
        self.tensors: list[tfl.TensorT] = []

    def tensor(
        self, name: str, shape: list[int], ttype: int, data: npt.NDArray[np.generic] | None = None,
        quant: Quant | None = None,
    ) -> int:  # fmt: skip
        t = tfl.TensorT()
        t.name, t.shape, t.type = name, shape, ttype
        if shape and shape[0] == 1 and data is None:
            t.shapeSignature = [-1, *shape[1:]]  # dynamic batch
        t.buffer = 0
        if data is not None:
            buf = tfl.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
            self.buffers.append(buf)
            t.buffer = len(self.buffers) - 1
        if quant is not None:
            q = tfl.QuantizationParametersT()
            q.scale, q.zeroPoint = [float(quant[0])], [int(quant[1])]
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1


def _op(opcode: int, inputs: list[int], outputs: list[int], relu: bool = False) -> tfl.OperatorT:
    op = tfl.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, inputs, outputs
    if opcode == 0:
        op.builtinOptionsType = tfl.BuiltinOptions.FullyConnectedOptions
        op.builtinOptions = tfl.FullyConnectedOptionsT()
        op.builtinOptions.fusedActivationFunction = (
            tfl.ActivationFunctionType.RELU if relu else tfl.ActivationFunctionType.NONE
        )
    else:
        op.builtinOptionsType = tfl.BuiltinOptions.SoftmaxOptions
        op.builtinOptions = tfl.SoftmaxOptionsT()
        op.builtinOptions.beta = 1.0
    return op


def _finish(b: _Builder, ops: list[tfl.OperatorT], int8: bool) -> bytes:
    codes = []
    for code, version in ((tfl.BuiltinOperator.FULLY_CONNECTED, 4 if int8 else 1),
                          (tfl.BuiltinOperator.SOFTMAX, 2 if int8 else 1)):  # fmt: skip
        oc = tfl.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, code, version
        codes.append(oc)
    sub = tfl.SubGraphT()
    sub.tensors, sub.operators, sub.name = b.tensors, ops, "main"
    sub.inputs, sub.outputs = [0], [len(b.tensors) - 1]
    sig = tfl.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = "serving_default", 0
    sig.inputs, sig.outputs = [tfl.TensorMapT()], [tfl.TensorMapT()]
    sig.inputs[0].name, sig.inputs[0].tensorIndex = "input", 0
    sig.outputs[0].name, sig.outputs[0].tensorIndex = "probs", len(b.tensors) - 1
    model = tfl.ModelT()
    model.version, model.description = 3, "wasmgate digits MLP 64-32-10 (make_models.py)"
    model.operatorCodes, model.subgraphs, model.buffers = codes, [sub], b.buffers
    model.signatureDefs = [sig]
    fb = flatbuffers.Builder(1024)
    fb.Finish(model.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


def float_model(w1: F32, b1: F32, w2: F32, b2: F32) -> bytes:
    b = _Builder()
    x = b.tensor("input", [1, 64], tfl.TensorType.FLOAT32)
    tw1 = b.tensor("fc0_w", list(w1.shape), tfl.TensorType.FLOAT32, w1)
    tb1 = b.tensor("fc0_b", list(b1.shape), tfl.TensorType.FLOAT32, b1)
    h = b.tensor("relu0", [1, 32], tfl.TensorType.FLOAT32)
    tw2 = b.tensor("fc1_w", list(w2.shape), tfl.TensorType.FLOAT32, w2)
    tb2 = b.tensor("fc1_b", list(b2.shape), tfl.TensorType.FLOAT32, b2)
    logits = b.tensor("fc1", [1, 10], tfl.TensorType.FLOAT32)
    probs = b.tensor("probs", [1, 10], tfl.TensorType.FLOAT32)
    ops = [_op(0, [x, tw1, tb1], [h], relu=True), _op(0, [h, tw2, tb2], [logits]),
           _op(1, [logits], [probs])]  # fmt: skip
    return _finish(b, ops, int8=False)


def _asym(lo: float, hi: float) -> Quant:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


def _sym_weights(w: F32) -> tuple[npt.NDArray[np.int8], float]:
    scale = float(np.abs(w).max()) / 127.0
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), scale


def int8_model(w1: F32, b1: F32, w2: F32, b2: F32, calib: F32) -> bytes:
    h_f = np.maximum(calib @ w1.T + b1, 0)
    logits_f = h_f @ w2.T + b2
    q_in: Quant = (1.0, 0)
    q_h, q_logits, q_out = _asym(0.0, float(h_f.max())), _asym(*_range(logits_f)), (1 / 256, -128)
    qw1, s_w1 = _sym_weights(w1)
    qw2, s_w2 = _sym_weights(w2)
    qb1 = np.round(b1 / (q_in[0] * s_w1)).astype(np.int32)
    qb2 = np.round(b2 / (q_h[0] * s_w2)).astype(np.int32)
    b = _Builder()
    i8, i32 = tfl.TensorType.INT8, tfl.TensorType.INT32
    x = b.tensor("input", [1, 64], i8, quant=q_in)
    tw1 = b.tensor("fc0_w", list(w1.shape), i8, qw1, (s_w1, 0))
    tb1 = b.tensor("fc0_b", list(b1.shape), i32, qb1, (q_in[0] * s_w1, 0))
    h = b.tensor("relu0", [1, 32], i8, quant=q_h)
    tw2 = b.tensor("fc1_w", list(w2.shape), i8, qw2, (s_w2, 0))
    tb2 = b.tensor("fc1_b", list(b2.shape), i32, qb2, (q_h[0] * s_w2, 0))
    logits = b.tensor("fc1", [1, 10], i8, quant=q_logits)
    probs = b.tensor("probs", [1, 10], i8, quant=q_out)
    ops = [_op(0, [x, tw1, tb1], [h], relu=True), _op(0, [h, tw2, tb2], [logits]),
           _op(1, [logits], [probs])]  # fmt: skip
    return _finish(b, ops, int8=True)


def _range(a: F32) -> tuple[float, float]:
    return float(a.min()), float(a.max())


def run_tflite(path: Path, x: F32) -> F32:
    """Run a digits .tflite on raw pixels (quantizing/dequantizing for int8 files)."""
    interp = Interpreter(model_path=str(path), num_threads=1)
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    interp.resize_tensor_input(inp["index"], [len(x), 64])
    interp.allocate_tensors()
    if inp["dtype"] == np.int8:
        s, zp = inp["quantization"]
        interp.set_tensor(inp["index"], np.clip(np.round(x / s) + zp, -128, 127).astype(np.int8))
    else:
        interp.set_tensor(inp["index"], x.astype(np.float32))
    interp.invoke()
    y = interp.get_tensor(out["index"])
    if out["dtype"] == np.int8:
        s, zp = out["quantization"]
        return np.asarray((y.astype(np.float32) - zp) * s, dtype=np.float32)
    return np.asarray(y, dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, required=True)
    d: Path = parser.parse_args().dir
    inits = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(str(d / "digits-fp32.onnx")).graph.initializer
    }
    w1 = (inits["fc0_w"] * inits["norm_scale"][:, None]).T.astype(np.float32)  # fold x/16
    b1 = inits["fc0_b"].astype(np.float32)
    w2, b2 = inits["fc1_w"].T.astype(np.float32), inits["fc1_b"].astype(np.float32)
    with np.load(d / "digits-train.npz") as tr, np.load(d / "digits-test.npz") as te:
        calib, x_te, y_te = tr["x"].astype(np.float32), te["x"].astype(np.float32), te["y"]
    (d / "digits-fp32.tflite").write_bytes(float_model(w1, b1, w2, b2))
    (d / "digits-int8.tflite").write_bytes(int8_model(w1, b1, w2, b2, calib))
    for variant in ("fp32", "int8"):
        pred = np.argmax(run_tflite(d / f"digits-{variant}.tflite", x_te), axis=1)
        print(f"digits  {variant} tflite accuracy {np.mean(pred == y_te):.4f} (LiteRT)")


if __name__ == "__main__":
    main()

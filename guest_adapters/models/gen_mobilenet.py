"""MobileNet-class benchmark model (random weights): fp32 + static QDQ int8, not committed.

``python gen_mobilenet.py --out DIR [--bench]`` writes ``mobilenet-{fp32,int8}.onnx``;
``--bench`` also prints median batch-1 latency of both on the CPU EP and their ratio.

Graph (MobileNetV1 layout, width 0.5): input ``input`` FP32 [batch, 3, 160, 160] →
Conv3x3/2 (16) → 6 depthwise-separable blocks (depthwise 3x3 + ReLU, pointwise 1x1 + ReLU;
channels 32, 64/2, 64, 128/2, 128, 256/2) → GlobalAveragePool → Flatten → Gemm → ``logits``
FP32 [batch, 1000]. He-initialised weights (seed 3), so activations stay in range through the
stack; calibration on 32 seeded random images.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from wasmgate.guest_adapters.quantize import quantize_model

SIZE = 128
CLASSES = 1000
BLOCKS = (  # MobileNetV1: (out channels, stride) of the 13 depthwise-separable blocks
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)  # fmt: skip


class _Graph:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def conv(self, x: str, shape: tuple[int, int, int], stride: int, group: int, name: str) -> str:
        cin, cout, k = shape
        fan_in = (cin // group) * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k))
        b = self.rng.normal(0, 0.01, cout)
        self.inits += [numpy_helper.from_array(w.astype(np.float32), f"{name}_w"),
                       numpy_helper.from_array(b.astype(np.float32), f"{name}_b")]  # fmt: skip
        pad = k // 2
        self.nodes.append(helper.make_node(
            "Conv", [x, f"{name}_w", f"{name}_b"], [name], name=name, kernel_shape=[k, k],
            strides=[stride, stride], pads=[pad] * 4, group=group,
        ))  # fmt: skip
        self.nodes.append(helper.make_node("Relu", [name], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"


def build() -> onnx.ModelProto:
    g = _Graph(np.random.default_rng(3))
    cur, ch = g.conv("input", (3, 32, 3), 2, 1, "stem"), 32
    for i, (cout, stride) in enumerate(BLOCKS):
        cur = g.conv(cur, (ch, ch, 3), stride, ch, f"b{i}_dw")
        cur, ch = g.conv(cur, (ch, cout, 1), 1, 1, f"b{i}_pw"), cout
    fc_w = g.rng.normal(0, np.sqrt(1.0 / ch), (ch, CLASSES)).astype(np.float32)
    g.inits += [numpy_helper.from_array(fc_w, "fc_w"),
                numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc_b")]  # fmt: skip
    g.nodes += [
        helper.make_node("GlobalAveragePool", [cur], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(
        g.nodes, "mobilenet_class",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])],
        g.inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.producer_name = "wasmgate-make-models"
    onnx.checker.check_model(model)
    return model


def calibration_images(n: int = 32) -> npt.NDArray[np.float32]:
    return np.random.default_rng(4).normal(0, 1, (n, 3, SIZE, SIZE)).astype(np.float32)


def median_ms(sessions: dict[str, ort.InferenceSession], rounds: int = 60) -> dict[str, float]:
    """Median batch-1 latency per session, measured in interleaved rounds after a warm-up."""
    x = calibration_images(1)
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for r in range(rounds + 5):
        for k, sess in sessions.items():
            t0 = time.perf_counter()
            sess.run(None, {"input": x})
            if r >= 5:
                times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bench", action="store_true", help="print fp32 vs int8 latency")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(build(), out / "mobilenet-fp32.onnx")
    quantize_model(
        out / "mobilenet-fp32.onnx", out / "mobilenet-int8.onnx",
        calibration={"input": calibration_images()},
    )  # fmt: skip
    if args.bench:
        opts = ort.SessionOptions()
        sessions = {v: ort.InferenceSession(str(out / f"mobilenet-{v}.onnx"), opts,
                                            providers=["CPUExecutionProvider"])
                    for v in ("fp32", "int8")}  # fmt: skip
        ms = median_ms(sessions)
        print(
            f"mobilenet {SIZE}x{SIZE} batch 1 median: fp32 {ms['fp32']:.2f} ms, "
            f"int8 {ms['int8']:.2f} ms, speed-up {ms['fp32'] / ms['int8']:.2f}x"
        )


if __name__ == "__main__":
    main()

"""INT8 quantization of ONNX models (the core of ``wasmgate quantize``).

Two modes, chosen by whether calibration data is given:

* **static QDQ** (calibration data): activations and weights int8 (S8S8, the ONNX Runtime
  default and first choice), per-channel weights, MinMax calibration. ORT fuses the QDQ pairs
  into QGemm / QLinearConv / QLinearMatMul at load time. This is the mode for every model we ship.
* **dynamic** (no calibration data): int8 weights, activations quantized per batch at run time
  (MatMulInteger / DynamicQuantizeMatMul). Refused for convolutional models: dynamic Conv
  becomes ConvInteger, which is *slower* than fp32 on the CPU EP — measured on this project's
  MobileNet-class fixture (``DYNAMIC_CONV_MEASUREMENT``) and in ``hardware.md`` §3.2.

Calibration data is an ``.npz`` file: one array per model input (by input name), or a single
array named ``x`` for a one-input model. An array ``y`` (labels) enables the accuracy report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

from wasmgate.guest_adapters.errors import GuestAdapterError

Mode = Literal["static", "dynamic"]
Progress = Callable[[int], None]

CONV_OPS = frozenset({"Conv", "ConvTranspose"})
DYNAMIC_CONV_MEASUREMENT = (
    "dynamic (ConvInteger) quantization makes convolutions slower than fp32 on the ONNX Runtime "
    "CPU EP: measured 0.12x on the MobileNet-class fixture (fp32 10.4 ms vs dynamic 85 ms, "
    "batch 1, 1 thread, ORT 1.32, AVX2 x86-64) and 0.85x on a 3-conv net (hardware.md §3.2)"
)
CALIBRATION_BATCH = 64


class QuantizeError(GuestAdapterError):
    """The model or the data cannot be quantized as asked; the message says why."""


@dataclass(frozen=True)
class QuantizeResult:
    """What ``quantize_model`` did: the mode, both file sizes, and accuracies when labelled."""

    mode: Mode
    fp32_bytes: int
    int8_bytes: int
    accuracy_fp32: float | None = None
    accuracy_int8: float | None = None


def load_npz(path: Path) -> dict[str, npt.NDArray[np.generic]]:
    """All arrays of an ``.npz`` file (no pickles), or a clear error."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError) as e:
        raise QuantizeError(f"{path}: not a readable .npz file ({e})") from e


def is_convolutional(model: onnx.ModelProto) -> bool:
    """True if any node (including in subgraphs) is a convolution."""

    def walk(graph: onnx.GraphProto) -> bool:
        for node in graph.node:
            if node.op_type in CONV_OPS:
                return True
            for attr in node.attribute:
                subgraphs = [*attr.graphs, attr.g] if attr.HasField("g") else list(attr.graphs)
                if any(walk(g) for g in subgraphs):
                    return True
        return False

    return walk(model.graph)


def calibration_inputs(
    model: onnx.ModelProto, arrays: Mapping[str, npt.NDArray[np.generic]]
) -> dict[str, npt.NDArray[np.float32]]:
    """Map npz arrays onto the model's inputs (by name, or ``x`` for a one-input model)."""
    init_names = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init_names]
    if len(names) == 1 and names[0] not in arrays and "x" in arrays:
        return {names[0]: np.asarray(arrays["x"], dtype=np.float32)}
    missing = [n for n in names if n not in arrays]
    if missing:
        raise QuantizeError(
            f"calibration data has no array for input(s) {missing}; "
            f"arrays present: {sorted(arrays)} (use the input name, or 'x' for one input)"
        )
    feeds = {n: np.asarray(arrays[n], dtype=np.float32) for n in names}
    counts = {len(a) for a in feeds.values()}
    if len(counts) != 1 or 0 in counts:
        raise QuantizeError(f"calibration arrays need the same, non-zero length; got {counts}")
    return feeds


def _batch_size(model: onnx.ModelProto, name: str) -> int:
    for inp in model.graph.input:
        if inp.name == name:
            dims = inp.type.tensor_type.shape.dim
            if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
                return int(dims[0].dim_value)
    return CALIBRATION_BATCH


class _Reader(CalibrationDataReader):  # type: ignore[misc]  # ORT's base class is untyped
    """Feeds calibration batches to ORT and reports each one to ``progress``."""

    def __init__(
        self, feeds: Mapping[str, npt.NDArray[np.float32]], batch: int, progress: Progress | None
    ) -> None:
        self._iter = iter(batches(feeds, batch))
        self._progress = progress

    def get_next(self) -> dict[str, npt.NDArray[np.float32]] | None:
        item = next(self._iter, None)
        if item is not None and self._progress is not None:
            self._progress(len(next(iter(item.values()))))
        return item


def batches(
    feeds: Mapping[str, npt.NDArray[np.float32]], batch: int
) -> list[dict[str, npt.NDArray[np.float32]]]:
    """Calibration batches: slices of ``batch`` rows (a fixed batch dim drops the remainder)."""
    total = len(next(iter(feeds.values())))
    stop = total if batch == CALIBRATION_BATCH else total - total % batch
    return [{k: v[i : i + batch] for k, v in feeds.items()} for i in range(0, stop, batch)]


def batch_size(model: onnx.ModelProto, feeds: Mapping[str, npt.NDArray[np.float32]]) -> int:
    """The model's fixed batch size, or ``CALIBRATION_BATCH`` for a dynamic batch dimension."""
    return _batch_size(model, next(iter(feeds)))


def quantize_model(
    src: Path,
    dst: Path,
    *,
    calibration: Mapping[str, npt.NDArray[np.generic]] | None = None,
    labelled: tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]] | None = None,
    progress: Progress | None = None,
    per_channel: bool = True,
    exclude_nodes: Sequence[str] = (),
) -> QuantizeResult:
    """Quantize ``src`` to ``dst``: static QDQ with calibration data, else dynamic (not for CNNs).

    ``progress`` is called with the number of calibration samples after each batch.
    ``labelled`` = (x, y) adds the accuracy of both models to the result.
    ``exclude_nodes`` stay fp32 (e.g. an input normalisation whose input spans very different
    ranges per feature, which one int8 scale cannot represent).
    """
    try:
        model = onnx.load(str(src))
    except Exception as e:  # OSError, protobuf DecodeError, ...
        raise QuantizeError(f"{src}: not a readable ONNX model ({e})") from e
    if calibration is None and is_convolutional(model):
        raise QuantizeError(
            f"{src} has convolutions; refusing dynamic quantization ({DYNAMIC_CONV_MEASUREMENT}). "
            "Pass calibration data (--calibration DATA.npz) for static QDQ quantization."
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    hint_filter = _DropPreprocessHint()
    logging.getLogger().addFilter(hint_filter)
    try:
        if calibration is not None:
            feeds = calibration_inputs(model, calibration)
            batch = batch_size(model, feeds)
            _static(src, dst, _Reader(feeds, batch, progress), per_channel, exclude_nodes)
            mode: Mode = "static"
        else:
            quantize_dynamic(
                src, dst, weight_type=QuantType.QInt8, per_channel=per_channel,
                nodes_to_exclude=list(exclude_nodes),
            )  # fmt: skip
            mode = "dynamic"
    except QuantizeError:
        raise
    except Exception as e:  # ORT raises bare Exception/RuntimeError/ValueError for bad graphs
        raise QuantizeError(f"quantizing {src} failed: {e}") from e
    finally:
        logging.getLogger().removeFilter(hint_filter)
    result = QuantizeResult(mode, src.stat().st_size, dst.stat().st_size)
    if labelled is not None:
        x, y = labelled
        result = QuantizeResult(
            mode, result.fp32_bytes, result.int8_bytes, accuracy(src, x, y), accuracy(dst, x, y)
        )
    return result


class _DropPreprocessHint(logging.Filter):
    """ORT logs "Please consider to run pre-processing" on every call; our models need none."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider")


def _static(
    src: Path, dst: Path, reader: _Reader, per_channel: bool, exclude: Sequence[str]
) -> None:
    quantize_static(
        src,
        dst,
        reader,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        calibrate_method=CalibrationMethod.MinMax,
        calibration_providers=["CPUExecutionProvider"],
        nodes_to_exclude=list(exclude),
    )


def run_model(path: Path, x: npt.NDArray[np.generic]) -> npt.NDArray[np.float32]:
    """First output of a one-input model on the CPU EP."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    out = sess.run(None, {name: np.asarray(x, dtype=np.float32)})[0]
    return np.asarray(out, dtype=np.float32)


def predict_labels(scores: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """Class per row: argmax, or ``score >= 0.5`` for a single-output (binary) model."""
    flat = scores.reshape(len(scores), -1)
    if flat.shape[1] == 1:
        return np.asarray(flat[:, 0] >= 0.5, dtype=np.int64)
    return np.asarray(np.argmax(flat, axis=1), dtype=np.int64)


def accuracy(path: Path, x: npt.NDArray[np.generic], y: npt.NDArray[np.generic]) -> float:
    """Fraction of rows of ``x`` whose predicted class equals ``y``."""
    if len(x) != len(y) or len(x) == 0:
        raise QuantizeError(
            f"labelled data needs x and y of the same non-zero length, got {len(x)}/{len(y)}"
        )
    pred = predict_labels(run_model(path, x))
    return float(np.mean(pred == np.asarray(y).astype(np.int64).reshape(-1)))

"""INT4 weight-only quantization of ONNX models (``wasmgate quantize --int4``).

ONNX Runtime's ``MatMulNBitsQuantizer`` replaces each MatMul whose weight is a constant by a
``MatMulNBits`` node (com.microsoft): the weight packed two 4-bit values per byte in blocks of
``block_size`` along K, one scale per block (plus a zero point per block when asymmetric).
Activations stay fp32, so no calibration data is needed. It pays where the weights dominate
(matmul-heavy, transformer-style models: the file shrinks ~6-7x and a memory-bound MatMul reads
a quarter of the bytes); convolutions and small models gain nothing, and INT8 is then the better
choice. ``MatMulNBits`` runs on ONNX Runtime's CPU execution provider (x86-64 and arm64).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx

from wasmgate.extras import require
from wasmgate.guest_adapters.quantize import QuantizeError, accuracy

BLOCK_SIZES = (16, 32, 64, 128)
"""Block sizes ONNX Runtime's MatMulNBits kernels accept (a power of two >= 16)."""


@dataclass(frozen=True)
class Int4Result:
    """What ``quantize_int4`` did: sizes, how many MatMuls became MatMulNBits, accuracies."""

    fp32_bytes: int
    int4_bytes: int
    matmuls: int
    quantized: int
    accuracy_fp32: float | None = None
    accuracy_int4: float | None = None


def quantize_int4(
    src: Path,
    dst: Path,
    *,
    block_size: int = 32,
    symmetric: bool = True,
    labelled: tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]] | None = None,
) -> Int4Result:
    """Write ``src`` with its constant-weight MatMuls as 4-bit ``MatMulNBits`` to ``dst``.

    `MissingExtra` without the ``sdk`` extra (ONNX Runtime's INT4 packer needs onnx-ir)."""
    require("onnx_ir", "INT4 quantization")
    if block_size not in BLOCK_SIZES:
        raise QuantizeError(f"block size {block_size}: choose one of {list(BLOCK_SIZES)}")
    try:
        model = onnx.load(str(src))
    except Exception as e:  # OSError, protobuf DecodeError, ...
        raise QuantizeError(f"{src}: not a readable ONNX model ({e})") from e
    matmuls = sum(1 for n in model.graph.node if n.op_type == "MatMul")
    if matmuls == 0:
        raise QuantizeError(f"{src} has no MatMul: INT4 weight-only quantization changes nothing")
    quantized = _quantize(model, block_size, symmetric)
    done = sum(1 for n in quantized.graph.node if n.op_type == "MatMulNBits")
    if done == 0:
        raise QuantizeError(f"{src}: no MatMul has a constant weight ONNX Runtime can pack")
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(quantized, str(dst))
    acc = (accuracy(src, *labelled), accuracy(dst, *labelled)) if labelled else (None, None)
    return Int4Result(src.stat().st_size, dst.stat().st_size, matmuls, done, *acc)


def _quantize(model: onnx.ModelProto, block_size: int, symmetric: bool) -> onnx.ModelProto:
    # Imported here: the quantizer pulls in onnx_ir, which nothing else needs.
    from onnxruntime.quantization.matmul_nbits_quantizer import (  # noqa: PLC0415
        MatMulNBitsQuantizer,
    )

    quiet = logging.getLogger("onnxruntime.quantization")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # it logs every node it packs at INFO
    try:
        # ONNX Runtime 1.23 (Python 3.10's last) has no ``bits``: it always packs 4.
        takes_bits = "bits" in inspect.signature(MatMulNBitsQuantizer).parameters
        quantizer = MatMulNBitsQuantizer(
            model,
            block_size=block_size,
            is_symmetric=symmetric,
            **({"bits": 4} if takes_bits else {}),
        )
        quantizer.process()
    except Exception as e:  # ORT raises bare Exception/ValueError for graphs it cannot pack
        raise QuantizeError(f"INT4 quantization failed: {e}") from e
    finally:
        quiet.setLevel(level)
    packed: onnx.ModelProto = quantizer.model.model
    return packed

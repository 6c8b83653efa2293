"""`wasmgate quantize`: quantize an ONNX model to INT8 (static QDQ with calibration data),
or its MatMul weights to INT4.

    wasmgate quantize MODEL.onnx --calibration TRAIN.npz [--labels TEST.npz] --out MODEL-int8.onnx
    wasmgate quantize MODEL.onnx --out MODEL-int8.onnx          # dynamic; refused for CNNs
    wasmgate quantize MODEL.onnx --int4 [--block-size 32] [--asymmetric] [--labels TEST.npz] \
        --out MODEL-int4.onnx                                   # weight-only, MatMulNBits

``.npz`` files hold one float array per model input (by input name, or ``x`` for a one-input
model); ``--labels`` files also hold ``y`` (class per row; for a one-output sigmoid model,
0/1). Without ``--labels``, a ``y`` array in the calibration file is used for the accuracy line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the test extras

from wasmgate.guest_adapters.quantize import (
    QuantizeError,
    QuantizeResult,
    load_npz,
    quantize_model,
)
from wasmgate.guest_adapters.quantize_int4 import BLOCK_SIZES, quantize_int4
from wasmgate.runtime.cli._common import EXIT_OK, EXIT_USAGE, CliError, SubParsers, plain_text

DESCRIPTION = __doc__.split("\n\n")[0] if __doc__ else ""


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "quantize",
        help="Quantize an ONNX model to INT8 (or its MatMul weights to INT4).",
        description=plain_text(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", type=Path, metavar="MODEL.onnx", help="fp32 ONNX model")
    parser.add_argument(
        "--out", type=Path, required=True, metavar="OUT.onnx", help="int8 model to write"
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        metavar="DATA.npz",
        help="representative inputs: static QDQ quantization (without: dynamic, not for CNNs)",
    )
    parser.add_argument(
        "--labels",
        type=Path,
        metavar="TEST.npz",
        help="labelled data (x, y): print both accuracies",
    )
    parser.add_argument(
        "--per-tensor",
        action="store_true",
        help="one weight scale per tensor instead of per channel",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    int4 = parser.add_argument_group("INT4 weight-only (MatMulNBits)")
    int4.add_argument(
        "--int4",
        action="store_true",
        help="4-bit weights for every constant-weight MatMul, fp32 activations (no calibration)",
    )
    int4.add_argument(
        "--block-size",
        type=int,
        default=32,
        choices=BLOCK_SIZES,
        help="weights per scale along K (default 32; smaller: more accurate, larger file)",
    )
    sym = int4.add_mutually_exclusive_group()
    sym.add_argument(
        "--symmetric", dest="symmetric", action="store_true", default=True,
        help="no zero points (default)",
    )  # fmt: skip
    sym.add_argument(
        "--asymmetric", dest="symmetric", action="store_false", help="a zero point per block"
    )
    parser.set_defaults(func=_run)


def _labelled(
    arrays: dict[str, npt.NDArray[np.generic]], source: Path
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]:
    xs = [k for k in arrays if k != "y"]
    if "y" not in arrays or len(xs) != 1:
        raise CliError(
            f"{source}: labelled data needs arrays 'y' and exactly one input array, "
            f"got {sorted(arrays)}"
        )
    return arrays[xs[0]], arrays["y"]


def _run(args: argparse.Namespace) -> int:
    try:
        return _quantize(args)
    except QuantizeError as e:
        raise CliError(str(e)) from e


def _quantize(args: argparse.Namespace) -> int:
    model: Path = args.model
    out: Path = args.out
    if not model.is_file():
        raise CliError(f"{model}: no such model file")
    if out.resolve() == model.resolve():
        raise CliError(
            "--out must differ from the input model (it would be overwritten)", EXIT_USAGE
        )
    if args.int4:
        return _int4(args, model, out)
    calibration = load_npz(args.calibration) if args.calibration else None
    labelled, label_note = None, ""
    if args.labels:
        labelled = _labelled(load_npz(args.labels), args.labels)
    elif calibration is not None and "y" in calibration:
        labelled, label_note = (
            _labelled(calibration, args.calibration),
            " (on the calibration data)",
        )
        calibration = {k: v for k, v in calibration.items() if k != "y"}
    total = len(next(iter(calibration.values()))) if calibration else 1
    desc = "calibrating" if calibration else "quantizing weights"
    with tqdm(total=total, desc=desc, unit=" samples" if calibration else " model",
              file=sys.stderr, disable=args.no_progress) as bar:  # fmt: skip
        result = quantize_model(
            model, out, calibration=calibration, labelled=labelled,
            progress=bar.update, per_channel=not args.per_tensor,
        )  # fmt: skip
        bar.update(total - bar.n)
    _report(result, out, args, label_note, labelled)
    return EXIT_OK


def _report(
    result: QuantizeResult,
    out: Path,
    args: argparse.Namespace,
    label_note: str,
    labelled: tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]] | None,
) -> None:
    weights = "per-tensor" if args.per_tensor else "per-channel"
    if result.mode == "static":
        print(f"mode: static QDQ int8 (S8 activations, {weights} S8 weights, MinMax calibration)")
    else:
        print(f"mode: dynamic int8 ({weights} S8 weights, activations quantized at run time)")
    ratio = result.int8_bytes / result.fp32_bytes
    print(f"size: fp32 {result.fp32_bytes:,} B -> int8 {result.int8_bytes:,} B ({ratio:.2f}x)")
    if (
        labelled is not None
        and result.accuracy_fp32 is not None
        and result.accuracy_int8 is not None
    ):
        delta = (result.accuracy_int8 - result.accuracy_fp32) * 100
        print(
            f"accuracy on {len(labelled[1])} labelled samples{label_note}: "
            f"fp32 {result.accuracy_fp32:.4f}, int8 {result.accuracy_int8:.4f} "
            f"({delta:+.2f} points)"
        )
    print(f"wrote {out}")


def _int4(args: argparse.Namespace, model: Path, out: Path) -> int:
    if args.calibration:
        raise CliError("--int4 quantizes weights only: --calibration does not apply", EXIT_USAGE)
    labelled = _labelled(load_npz(args.labels), args.labels) if args.labels else None
    result = quantize_int4(
        model, out, block_size=args.block_size, symmetric=args.symmetric, labelled=labelled
    )
    zero = "symmetric" if args.symmetric else "asymmetric, a zero point per block"
    print(f"mode: int4 weight-only (MatMulNBits, block size {args.block_size}, {zero})")
    print(f"matmuls: {result.quantized} of {result.matmuls} packed to 4 bits")
    ratio = result.int4_bytes / result.fp32_bytes
    print(f"size: fp32 {result.fp32_bytes:,} B -> int4 {result.int4_bytes:,} B ({ratio:.2f}x)")
    if labelled is not None and result.accuracy_fp32 is not None:
        acc4 = result.accuracy_int4 or 0.0
        print(
            f"accuracy on {len(labelled[1])} labelled samples: fp32 {result.accuracy_fp32:.4f}, "
            f"int4 {acc4:.4f} ({(acc4 - result.accuracy_fp32) * 100:+.2f} points)"
        )
    print(f"wrote {out}")
    return EXIT_OK

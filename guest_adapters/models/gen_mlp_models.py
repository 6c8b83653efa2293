"""Generate the small MLP fixtures: digits classifier, digit/noise gate, pump anomaly detector.

Run by ``make_models.py`` (``python gen_mlp_models.py --out DIR``); every step has a fixed seed.
Writes ``digits-{fp32,int8}.onnx``, ``digits-test.npz``, ``digits-train.npz`` (training and
calibration data), ``gate-fp32.onnx``, ``gate-test.npz``,
``anomaly-{fp32,int8}.onnx``, ``anomaly-test.npz`` and ``anomaly-sample-*.json``, and prints
the figures. The anomaly features are defined in ``window_features`` (and in README.md).
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from wasmgate.guest_adapters.quantize import accuracy, quantize_model, run_model

F64 = npt.NDArray[np.float64]
OPSET = 17
IR_VERSION = 8  # ONNX Runtime >= 1.10 reads IR 8; keeps the files loadable on older edge builds
WINDOW = 64  # accel samples per anomaly window
SAMPLE_RATE_HZ = 1000.0
BANDS = ((1, 4), (5, 12), (13, 32))  # DFT bins (inclusive) of the low/mid/high energy bands
ANOMALY_THRESHOLD = 0.5
FEATURES = ("rms", "peak", "crest", "kurtosis", "band_low", "band_mid", "band_high", "temp")


def save_npz(path: Path, **arrays: npt.NDArray[np.generic]) -> None:
    """Like ``np.savez_compressed`` but byte-reproducible (fixed zip timestamps)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w") as f:
                np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)


def mlp_onnx(
    clf: MLPClassifier, *, name: str, in_dim: int, shift: F64, scale: F64, out_name: str, doc: str
) -> onnx.ModelProto:
    """ONNX graph of a trained ReLU MLP: ``(x - shift) * scale`` → Gemm/Relu… → softmax|sigmoid."""
    inits = [numpy_helper.from_array(scale.astype(np.float32), "norm_scale")]
    nodes = []
    cur = "input"
    if np.any(shift):
        inits.append(numpy_helper.from_array(shift.astype(np.float32), "norm_shift"))
        nodes.append(helper.make_node("Sub", [cur, "norm_shift"], ["centred"], name="norm_sub"))
        cur = "centred"
    nodes.append(helper.make_node("Mul", [cur, "norm_scale"], ["normalised"], name="norm_mul"))
    cur = "normalised"
    layers = list(zip(clf.coefs_, clf.intercepts_, strict=True))
    for i, (w, b) in enumerate(layers):
        inits += [
            numpy_helper.from_array(w.astype(np.float32), f"fc{i}_w"),
            numpy_helper.from_array(b.astype(np.float32), f"fc{i}_b"),
        ]
        nodes.append(helper.make_node("Gemm", [cur, f"fc{i}_w", f"fc{i}_b"], [f"fc{i}"]))
        cur = f"fc{i}"
        if i < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [cur], [f"relu{i}"]))
            cur = f"relu{i}"
    out_dim = int(layers[-1][0].shape[1])
    head = "Softmax" if out_dim > 1 else "Sigmoid"
    if head == "Softmax":
        nodes.append(helper.make_node(head, [cur], [out_name], axis=-1))
    else:
        nodes.append(helper.make_node(head, [cur], [out_name]))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", in_dim])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch", out_dim])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="wasmgate-make-models"
    )
    model.ir_version = IR_VERSION
    model.doc_string = doc
    onnx.checker.check_model(model)
    return model


def train_mlp(
    x: F64, y: npt.NDArray[np.int64], hidden: tuple[int, ...], seed: int
) -> MLPClassifier:
    clf = MLPClassifier(hidden_layer_sizes=hidden, alpha=1e-3, max_iter=2000, random_state=seed)
    clf.fit(x, y)
    return clf


def make_digits(out: Path) -> tuple[F64, F64]:
    """Digits MLP 64→32→10, fp32 + static int8. Returns (x_train, x_test) for the gate."""
    data = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(
        data.data, data.target, test_size=0.25, random_state=0, stratify=data.target
    )
    clf = train_mlp(x_tr / 16.0, y_tr, (32,), seed=0)
    model = mlp_onnx(
        clf, name="digits", in_dim=64, shift=np.zeros(64), scale=np.full(64, 1 / 16),
        out_name="probs", doc="8x8 digits MLP 64-32-10; input pixels 0..16, output softmax",
    )  # fmt: skip
    onnx.save(model, out / "digits-fp32.onnx")
    save_npz(out / "digits-test.npz", x=x_te.astype(np.float32), y=y_te.astype(np.int64))
    save_npz(out / "digits-train.npz", x=x_tr.astype(np.float32), y=y_tr.astype(np.int64))
    res = quantize_model(
        out / "digits-fp32.onnx", out / "digits-int8.onnx",
        calibration={"x": x_tr.astype(np.float32)}, labelled=(x_te, y_te),
    )  # fmt: skip
    if res.accuracy_fp32 is None or res.accuracy_int8 is None:
        raise SystemExit("digits: no accuracy computed")
    print(f"digits  fp32 onnx accuracy {res.accuracy_fp32:.4f} ({len(y_te)} held-out images)")
    print(f"digits  int8 onnx accuracy {res.accuracy_int8:.4f} (static QDQ, calibrated on train)")
    if abs(res.accuracy_fp32 - res.accuracy_int8) > 0.01:
        raise SystemExit("digits int8 accuracy is more than 1 point away from fp32")
    return x_tr, x_te


def noise_images(n: int, rng: np.random.Generator) -> F64:
    """Non-digit 8x8 images (0..16): blank, flat, uniform noise, salt, blobs, gradients."""

    def image(kind: int) -> F64:
        if kind == 0:
            return np.zeros(64)
        if kind == 1:
            return np.full(64, float(rng.integers(1, 17)))
        if kind == 2:
            return rng.integers(0, 17, 64).astype(float)
        if kind == 3:
            return np.where(rng.random(64) < rng.uniform(0.05, 0.35), rng.integers(8, 17, 64), 0.0)
        if kind == 4:
            return np.kron(rng.integers(0, 17, (4, 4)), np.ones((2, 2))).ravel().astype(float)
        return np.round(np.outer(np.ones(8), np.linspace(0, rng.uniform(4, 16), 8))).ravel()

    return np.stack([image(i % 6) for i in range(n)])


def make_gate(out: Path, x_tr: F64, x_te: F64) -> None:
    """Binary 'is this an 8x8 digit' gate (digits vs noise/blank), MLP 64→16→1."""
    rng = np.random.default_rng(1)
    neg_tr, neg_te = noise_images(len(x_tr), rng), noise_images(len(x_te), rng)
    x = np.vstack([x_tr, neg_tr])
    y = np.r_[np.ones(len(x_tr)), np.zeros(len(neg_tr))].astype(np.int64)
    clf = train_mlp(x / 16.0, y, (16,), seed=1)
    model = mlp_onnx(
        clf, name="gate", in_dim=64, shift=np.zeros(64), scale=np.full(64, 1 / 16),
        out_name="is_digit", doc="digit-vs-noise gate 64-16-1; input pixels 0..16, sigmoid",
    )  # fmt: skip
    onnx.save(model, out / "gate-fp32.onnx")
    xt = np.vstack([x_te, neg_te]).astype(np.float32)
    yt = np.r_[np.ones(len(x_te)), np.zeros(len(neg_te))].astype(np.int64)
    save_npz(out / "gate-test.npz", x=xt, y=yt)
    acc = accuracy(out / "gate-fp32.onnx", xt, yt)
    print(f"gate    fp32 onnx accuracy {acc:.4f} ({len(x_te)} digits + {len(neg_te)} noise images)")


def pump_window(kind: str, rng: np.random.Generator) -> tuple[F64, float]:
    """One 64-sample accel window (g, 1 kHz) and a temperature (°C) of a pump in state ``kind``."""
    t = np.arange(WINDOW) / SAMPLE_RATE_HZ
    f0, a1 = rng.uniform(40, 60), rng.uniform(0.6, 1.2)
    x = rng.uniform(0.9, 1.1) + a1 * np.sin(2 * np.pi * f0 * t + rng.uniform(0, 2 * np.pi))
    x += a1 * rng.uniform(0.1, 0.35) * np.sin(4 * np.pi * f0 * t + rng.uniform(0, 2 * np.pi))
    x += rng.normal(0, rng.uniform(0.05, 0.15), WINDOW)
    temp = float(np.clip(rng.normal(50, 5), 35, 65))
    if kind == "bearing":  # bearing-fault tones well above the running speed harmonics
        for _ in range(int(rng.integers(2, 4))):
            f = rng.uniform(250, 480)
            x += a1 * rng.uniform(0.15, 0.6) * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))
    elif kind == "spike":  # impacts: 1-3 short impulses
        for i in rng.integers(0, WINDOW, int(rng.integers(1, 4))):
            x[i] += rng.choice([-1, 1]) * a1 * rng.uniform(2.5, 6)
    elif kind == "overheat":
        temp = rng.uniform(68, 95)
    return np.round(x, 4), round(temp, 1)


def window_features(accel: F64, temp: float) -> F64:
    """The 8 anomaly features, in model input order (see FEATURES and README.md)."""
    x = accel - accel.mean()
    rms = float(np.sqrt(np.mean(x**2)))
    peak = float(np.max(np.abs(x)))
    crest = peak / rms if rms > 0 else 0.0
    kurt = float(np.mean(x**4)) / rms**4 if rms > 0 else 0.0
    power = np.abs(np.fft.rfft(x)[1 : WINDOW // 2 + 1]) ** 2  # bins 1..32
    total = float(power.sum())
    bands = [float(power[lo - 1 : hi].sum()) / total if total > 0 else 0.0 for lo, hi in BANDS]
    return np.array([rms, peak, crest, kurt, *bands, temp])


def anomaly_set(counts: dict[str, int], rng: np.random.Generator) -> tuple[F64, F64, list[str]]:
    kinds = [k for k, n in counts.items() for _ in range(n)]
    wins = [pump_window(k, rng) for k in kinds]
    return np.stack([w for w, _ in wins]), np.array([t for _, t in wins]), kinds


def make_anomaly(out: Path) -> None:
    """Pump anomaly MLP 8→16→1 on window features, fp32 + static int8, test set and samples."""
    rng = np.random.default_rng(2)
    kinds_all = ("normal", "bearing", "spike", "overheat")
    w_tr, t_tr, k_tr = anomaly_set(
        {"normal": 3000, "bearing": 400, "spike": 400, "overheat": 400}, rng
    )
    w_te, t_te, k_te = anomaly_set(
        {"normal": 1000, "bearing": 150, "spike": 150, "overheat": 150}, rng
    )
    f_tr = np.stack([window_features(w, t) for w, t in zip(w_tr, t_tr, strict=True)])
    f_te = np.stack([window_features(w, t) for w, t in zip(w_te, t_te, strict=True)])
    y_tr = np.array([k != "normal" for k in k_tr], dtype=np.int64)
    y_te = np.array([k != "normal" for k in k_te], dtype=np.int64)
    mean, std = f_tr.mean(axis=0), f_tr.std(axis=0)
    clf = train_mlp((f_tr - mean) / std, y_tr, (16,), seed=2)
    model = mlp_onnx(
        clf, name="anomaly", in_dim=len(FEATURES), shift=mean, scale=1 / std, out_name="score",
        doc="pump anomaly MLP 8-16-1 on window features " + ",".join(FEATURES),
    )  # fmt: skip
    onnx.save(model, out / "anomaly-fp32.onnx")
    # The raw features span 0..1 (bands) to ~100 (temp, kurtosis): one int8 scale for the raw
    # input would leave the bands ~3 levels, so the normalisation runs in fp32 (8 values/row).
    quantize_model(
        out / "anomaly-fp32.onnx", out / "anomaly-int8.onnx",
        calibration={"x": f_tr.astype(np.float32)}, exclude_nodes=("norm_sub", "norm_mul"),
    )  # fmt: skip
    kind_ids = np.array([kinds_all.index(k) for k in k_te], dtype=np.int64)
    save_npz(
        out / "anomaly-test.npz", windows=w_te.astype(np.float32), temps=t_te.astype(np.float32),
        labels=y_te, kinds=kind_ids, features=f_te.astype(np.float32),
    )  # fmt: skip
    for variant in ("fp32", "int8"):
        score = run_model(out / f"anomaly-{variant}.onnx", f_te.astype(np.float32))[:, 0]
        hit = score >= ANOMALY_THRESHOLD
        per_kind = " ".join(
            f"{k}={np.mean(hit[kind_ids == i]):.3f}" for i, k in enumerate(kinds_all) if i
        )
        print(
            f"anomaly {variant} detection rate {np.mean(hit[y_te == 1]):.4f} ({per_kind}), "
            f"false-positive rate {np.mean(hit[y_te == 0]):.4f} (threshold {ANOMALY_THRESHOLD})"
        )
    for i, kind in enumerate(kinds_all):
        j = int(np.flatnonzero(kind_ids == i)[0])
        payload = {"device": f"pump-{i + 1:02d}", "ts": 1764410000.0 + j,
                   "accel": [float(v) for v in w_te[j]], "temp": float(t_te[j])}  # fmt: skip
        text = json.dumps(payload, separators=(",", ":")) + "\n"
        (out / f"anomaly-sample-{kind}.json").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    x_tr, x_te = make_digits(out)
    make_gate(out, x_tr, x_te)
    make_anomaly(out)


if __name__ == "__main__":
    main()

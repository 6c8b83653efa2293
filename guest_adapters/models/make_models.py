"""Generate every model fixture of wasmgate, print their figures, and check the committed ones.

    python guest_adapters/models/make_models.py --out guest_adapters/models   # regenerate
    python guest_adapters/models/make_models.py --out guest_adapters/models --check

The work is done by three scripts next to this one, run as child processes (each is a
standalone script; see README.md): ``gen_mlp_models.py`` (digits, gate, anomaly),
``gen_tflite.py`` (digits as .tflite) and ``gen_mobilenet.py`` (benchmark CNN, not committed).
Generation writes ``SHA256SUMS`` for the committed (small) files. ``--check`` regenerates them
into a temporary directory and compares with ``SHA256SUMS``; a file whose bytes differ but that
behaves the same (see ``semantic_diff``) is reported as such, anything else fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
from ai_edge_litert.interpreter import Interpreter

from wasmgate.guest_adapters.quantize import run_model

HERE = Path(__file__).resolve().parent
COMMITTED = (
    "digits-fp32.onnx", "digits-int8.onnx", "digits-fp32.tflite", "digits-int8.tflite",
    "digits-test.npz", "digits-train.npz", "gate-fp32.onnx", "gate-test.npz",
    "anomaly-fp32.onnx", "anomaly-int8.onnx", "anomaly-test.npz",
    "anomaly-sample-normal.json", "anomaly-sample-bearing.json", "anomaly-sample-spike.json",
    "anomaly-sample-overheat.json",
)  # fmt: skip
# Which committed test inputs drive a model file in the semantic comparison.
MODEL_INPUTS = {"digits": ("digits-test.npz", "x"), "gate": ("gate-test.npz", "x"),
                "anomaly": ("anomaly-test.npz", "features")}  # fmt: skip
MAX_OUTPUT_DIFF = 0.05  # probability units
MIN_LABEL_AGREEMENT = 0.99


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_step(script: str, *args: str) -> None:
    subprocess.run([sys.executable, str(HERE / script), *args], check=True)


def generate(out: Path, *, mobilenet: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run_step("gen_mlp_models.py", "--out", str(out))
    run_step("gen_tflite.py", "--dir", str(out))
    lines = [f"{sha256(out / name)}  {name}\n" for name in COMMITTED]
    (out / "SHA256SUMS").write_text("".join(lines))
    if mobilenet:
        run_step("gen_mobilenet.py", "--out", str(out), "--bench")


def read_sums(path: Path) -> dict[str, str]:
    sums = {}
    for line in path.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name.lstrip("*")] = digest
    return sums


def _tflite_probs(path: Path, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    interp = Interpreter(model_path=str(path))
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    interp.resize_tensor_input(inp["index"], [len(x), x.shape[1]])
    interp.allocate_tensors()
    s_in, zp_in = inp["quantization"]
    feed = np.clip(np.round(x / s_in) + zp_in, -128, 127).astype(np.int8) if s_in else x
    interp.set_tensor(inp["index"], feed)
    interp.invoke()
    y = np.asarray(interp.get_tensor(out["index"]), dtype=np.float32)
    s_out, zp_out = out["quantization"]
    return np.asarray((y - zp_out) * s_out, dtype=np.float32) if s_out else y


def _model_outputs(path: Path, committed: Path) -> npt.NDArray[np.float32]:
    npz, key = MODEL_INPUTS[path.name.split("-")[0]]
    with np.load(committed / npz) as data:
        x = data[key].astype(np.float32)
    return _tflite_probs(path, x) if path.suffix == ".tflite" else run_model(path, x)


def semantic_diff(name: str, committed: Path, fresh: Path) -> str | None:
    """None if the regenerated file behaves like the committed one, else what differs."""
    a, b = committed / name, fresh / name
    if a.suffix in {".onnx", ".tflite"}:
        ya, yb = _model_outputs(a, committed), _model_outputs(b, committed)
        diff = float(np.abs(ya - yb).max())
        la, lb = (ya.argmax(1), yb.argmax(1)) if ya.shape[1] > 1 else (ya >= 0.5, yb >= 0.5)
        agree = float(np.mean(la == lb))
        if diff > MAX_OUTPUT_DIFF or agree < MIN_LABEL_AGREEMENT:
            return f"outputs differ: max |diff| {diff:.4f}, label agreement {agree:.4f}"
        return None
    if a.suffix == ".npz":
        with np.load(a) as da, np.load(b) as db:
            if sorted(da.files) != sorted(db.files):
                return f"arrays {sorted(da.files)} != {sorted(db.files)}"
            bad = [k for k in da.files if not np.allclose(da[k], db[k], rtol=1e-5, atol=1e-5)]
        return f"arrays differ: {bad}" if bad else None
    ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
    same = ja.keys() == jb.keys() and all(
        np.allclose(ja[k], jb[k]) if k != "device" else ja[k] == jb[k] for k in ja
    )
    return None if same else "payload differs"


def check(committed: Path) -> int:
    sums = read_sums(committed / "SHA256SUMS")
    failures = 0
    if sorted(sums) != sorted(COMMITTED):
        print(f"SHA256SUMS lists {sorted(sums)}, expected {sorted(COMMITTED)}")
        failures += 1
    with tempfile.TemporaryDirectory(prefix="wasmgate-models-") as tmp:
        fresh = Path(tmp)
        generate(fresh, mobilenet=False)
        for name in COMMITTED:
            if not (committed / name).is_file() or sums.get(name) != sha256(committed / name):
                print(f"{name}: committed file does not match SHA256SUMS")
                failures += 1
            elif sha256(fresh / name) == sums[name]:
                print(f"{name}: identical")
            elif (why := semantic_diff(name, committed, fresh)) is None:
                print(f"{name}: bytes differ, behaviour equal (see README 'Reproducibility')")
            else:
                print(f"{name}: DIFFERENT ({why})")
                failures += 1
    print("check passed" if not failures else f"check FAILED ({failures} file(s))")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="directory of the model files")
    parser.add_argument("--check", action="store_true", help="regenerate to a temp dir and compare")
    parser.add_argument("--no-mobilenet", action="store_true", help="skip the benchmark CNN")
    args = parser.parse_args()
    if args.check:
        return check(args.out)
    generate(args.out, mobilenet=not args.no_mobilenet)
    return 0


if __name__ == "__main__":
    sys.exit(main())

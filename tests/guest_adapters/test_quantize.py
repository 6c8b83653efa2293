"""`wasmgate quantize` and its module on real models and real ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fixtures.models import ModelFiles, get_models
from wasmgate.guest_adapters.quantize import QuantizeError, accuracy, quantize_model, run_model
from wasmgate.runtime.cli import main


@pytest.fixture(scope="module")
def files() -> ModelFiles:
    return get_models()


def op_types(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def int8_weights(path: Path) -> list[str]:
    return [
        i.name for i in onnx.load(str(path)).graph.initializer if i.data_type == TensorProto.INT8
    ]


def tiny_conv(path: Path) -> Path:
    """Conv 3x3 (4 ch) -> ReLU -> GAP -> Flatten, input [batch, 1, 8, 8]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(4, 1, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_static_quantization_keeps_digits_accuracy(files: ModelFiles, tmp_path: Path) -> None:
    with np.load(files.digits_train) as tr, np.load(files.digits_test) as te:
        calib, x, y = {"x": tr["x"]}, te["x"], te["y"]
    seen: list[int] = []
    out = tmp_path / "q.onnx"
    res = quantize_model(
        files.digits_fp32, out, calibration=calib, labelled=(x, y), progress=seen.append
    )
    assert res.mode == "static"
    assert sum(seen) == len(calib["x"])  # every calibration sample reported to the progress bar
    assert {"QuantizeLinear", "DequantizeLinear"} <= op_types(out)
    assert {"fc0_w_quantized", "fc1_w_quantized"} <= set(int8_weights(out))
    assert res.accuracy_fp32 is not None
    assert res.accuracy_int8 is not None
    assert abs(res.accuracy_fp32 - res.accuracy_int8) <= 0.01
    assert res.int8_bytes < res.fp32_bytes


def test_dynamic_quantization_of_an_mlp(files: ModelFiles, tmp_path: Path) -> None:
    out = tmp_path / "dyn.onnx"
    res = quantize_model(files.digits_fp32, out)
    assert res.mode == "dynamic"
    assert "DynamicQuantizeLinear" in op_types(out)
    assert int8_weights(out)
    with np.load(files.digits_test) as te:
        assert (
            accuracy(out, te["x"], te["y"]) >= accuracy(files.digits_fp32, te["x"], te["y"]) - 0.01
        )


def test_dynamic_quantization_of_a_cnn_is_refused(tmp_path: Path) -> None:
    model = tiny_conv(tmp_path / "conv.onnx")
    with pytest.raises(QuantizeError, match=r"convolutions.*slower than fp32.*--calibration"):
        quantize_model(model, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


def test_static_quantization_of_a_cnn(tmp_path: Path) -> None:
    model = tiny_conv(tmp_path / "conv.onnx")
    x = np.random.default_rng(1).normal(size=(40, 1, 8, 8)).astype(np.float32)
    out = tmp_path / "conv-int8.onnx"
    assert quantize_model(model, out, calibration={"input": x}).mode == "static"
    assert "QuantizeLinear" in op_types(out)
    np.testing.assert_allclose(run_model(out, x[:5]), run_model(model, x[:5]), atol=0.1)


def test_cli_static_prints_sizes_accuracies_and_progress(
    files: ModelFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "digits-int8.onnx"
    code = main([
        "quantize", str(files.digits_fp32), "--calibration", str(files.digits_train),
        "--labels", str(files.digits_test), "--out", str(out),
    ])  # fmt: skip
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "mode: static QDQ int8" in cap.out
    assert f"{files.digits_fp32.stat().st_size:,} B -> int8 {out.stat().st_size:,} B" in cap.out
    assert "accuracy on 450 labelled samples: fp32 0.97" in cap.out
    assert "calibrating" in cap.err
    assert "1347/1347" in cap.err  # the bar reached the end
    assert "Please consider" not in cap.err


def test_cli_uses_labels_in_the_calibration_file(
    files: ModelFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "q.onnx"
    argv = ["quantize", str(files.digits_fp32), "--calibration", str(files.digits_train)]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "samples (on the calibration data)" in cap.out
    assert cap.err == ""


def test_cli_refuses_dynamic_cnn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tiny_conv(tmp_path / "conv.onnx")
    assert main(["quantize", str(model), "--out", str(tmp_path / "o.onnx"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "refusing dynamic quantization" in err
    assert "0.12x" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--calibration", "MISSING.npz"], "not a readable .npz file"),
        (["--calibration", "BAD.npz"], "no array for input(s) ['input']"),
        (["--labels", "BAD.npz"], "needs arrays 'y'"),
    ],
)
def test_cli_bad_data_files(
    files: ModelFiles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    np.savez(tmp_path / "BAD.npz", features=np.zeros((4, 64), np.float32))
    args = [str(tmp_path / a) if a.endswith(".npz") else a for a in extra]
    out = tmp_path / "o.onnx"
    assert (
        main(["quantize", str(files.digits_fp32), *args, "--out", str(out), "--no-progress"]) == 1
    )
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_missing_model_and_same_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quantize", str(tmp_path / "nope.onnx"), "--out", str(tmp_path / "o.onnx")]) == 1
    assert "no such model file" in capsys.readouterr().err
    model = tiny_conv(tmp_path / "m.onnx")
    assert main(["quantize", str(model), "--out", str(model)]) == 2
    assert "--out must differ" in capsys.readouterr().err


def test_cli_not_an_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"this is not a protobuf \xff\xfe")
    assert main(["quantize", str(bogus), "--out", str(tmp_path / "o.onnx"), "--no-progress"]) == 1
    assert "not a readable ONNX model" in capsys.readouterr().err

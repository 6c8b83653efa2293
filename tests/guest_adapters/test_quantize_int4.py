"""`wasmgate quantize --int4` on the generated transformer-style model, real ONNX Runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.fixtures.models import generator
from wasmgate.guest_adapters.quantize import QuantizeError, run_model
from wasmgate.guest_adapters.quantize_int4 import quantize_int4
from wasmgate.runtime.cli import main


@pytest.fixture(scope="module")
def gen() -> Any:
    return generator("gen_transformer")


@pytest.fixture(scope="module")
def model(gen: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("transformer")
    path = out / "transformer-fp32.onnx"
    path.write_bytes(gen.transformer_onnx())
    x, y = gen.labelled(path.read_bytes())
    np.savez(out / "test.npz", x=x, y=y)
    return path


def test_generator_is_deterministic_and_matmul_heavy(gen: Any, model: Path) -> None:
    assert gen.transformer_onnx() == model.read_bytes()
    graph = onnx.load(str(model)).graph
    weights = {i.name: int(np.prod(i.dims)) for i in graph.initializer}
    matmul = sum(weights[n.input[1]] for n in graph.node if n.op_type == "MatMul")
    assert matmul / sum(weights.values()) > 0.95


@pytest.mark.parametrize(("block", "symmetric"), [(16, True), (32, False), (128, True)])
def test_every_matmul_becomes_matmulnbits(
    model: Path, tmp_path: Path, block: int, symmetric: bool
) -> None:
    out = tmp_path / "int4.onnx"
    data = np.load(model.parent / "test.npz")
    result = quantize_int4(
        model, out, block_size=block, symmetric=symmetric, labelled=(data["x"], data["y"])
    )
    nodes = onnx.load(str(out)).graph.node
    packed = [n for n in nodes if n.op_type == "MatMulNBits"]
    assert (result.matmuls, result.quantized, len(packed)) == (6, 6, 6)
    assert all({a.name: a.i for a in n.attribute}["block_size"] == block for n in packed)
    assert {"MatMul"}.isdisjoint(n.op_type for n in nodes)
    assert result.int4_bytes < result.fp32_bytes / 5
    assert result.accuracy_fp32 == 1.0  # the labels are the fp32 model's own classes
    assert result.accuracy_int4 is not None
    assert result.accuracy_int4 > 0.7  # 4-bit weights keep most decisions on a random net
    y32, y4 = run_model(model, data["x"][:8]), run_model(out, data["x"][:8])
    assert np.all(np.isfinite(y4))
    assert np.abs(y4 - y32).max() < np.abs(y32).max()


def test_refusals(model: Path, tmp_path: Path) -> None:
    with pytest.raises(QuantizeError, match="block size 24"):
        quantize_int4(model, tmp_path / "o.onnx", block_size=24)
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"not onnx")
    with pytest.raises(QuantizeError, match="not a readable ONNX model"):
        quantize_int4(bogus, tmp_path / "o.onnx")


def test_cli_prints_mode_sizes_and_accuracy(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t-int4.onnx"
    code = main([
        "quantize", str(model), "--int4", "--block-size", "64", "--asymmetric",
        "--labels", str(model.parent / "test.npz"), "--out", str(out),
    ])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    assert "mode: int4 weight-only (MatMulNBits, block size 64, asymmetric" in text
    assert "matmuls: 6 of 6 packed to 4 bits" in text
    assert "-> int4 " in text
    assert "accuracy on 512 labelled samples: fp32 1.0000, int4 0." in text
    assert out.is_file()


def test_cli_int4_refuses_calibration_and_models_without_matmul(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    npz = model.parent / "test.npz"
    out = str(tmp_path / "o.onnx")
    assert main(["quantize", str(model), "--int4", "--calibration", str(npz), "--out", out]) == 2
    assert "--calibration does not apply" in capsys.readouterr().err
    conv = tmp_path / "conv.onnx"
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    vi = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [node], "g", [vi("x", onnx.TensorProto.FLOAT, [1])], [vi("y", onnx.TensorProto.FLOAT, [1])]
    )
    onnx.save(onnx.helper.make_model(graph), str(conv))
    assert main(["quantize", str(conv), "--int4", "--out", out]) == 1
    assert "has no MatMul" in capsys.readouterr().err

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.runtime.backends.conftest import GRAVITON, X86, make_profile
from tests.runtime.backends.models import (
    bf16_relu_onnx,
    external_data_onnx,
    int8_dynamic_onnx,
    mlp_onnx,
    mlp_reference,
)
from wasmgate.device_profiles import DeviceProfile, load_profile
from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend, onnx_support
from wasmgate.runtime.backends.onnx import OnnxBackend, OnnxModel
from wasmgate.runtime.backends.onnx_providers import ep_context, report_fallback
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox.models import InputMismatch, ModelHandle, TensorSpec, validate
from wasmgate.signing.records import VerifiedBlob


def _load(profile: DeviceProfile, data: bytes | None = None, **kw: object) -> OnnxModel:
    options = LoadOptions(profile, host=X86, **kw)  # type: ignore[arg-type]
    return OnnxBackend().load(data or mlp_onnx(), ModelSpec("mlp"), options)


def test_loads_from_bytes_and_matches_numpy(cpu_profile: DeviceProfile, batch: np.ndarray) -> None:
    model = _load(cpu_profile)
    assert isinstance(model, ModelHandle)
    assert model.inputs == [TensorSpec("x", "FP32", (-1, 16))]
    assert model.outputs == [TensorSpec("y", "FP32", (-1, 8))]
    assert model.providers == ("CPUExecutionProvider",)
    assert model.precision == "fp32"
    assert model.dynamic_batch
    assert model.node_placement == {"CPUExecutionProvider": 2}  # MatMul+Add fused to Gemm, Relu
    np.testing.assert_allclose(model.infer([batch])[0], mlp_reference(batch), rtol=1e-5)


def test_registry_creates_onnx_backend() -> None:
    assert create_backend("onnx").type_key == "onnx"
    with pytest.raises(BackendError, match="unknown model format 'pt'"):
        create_backend("pt")


def test_absent_providers_are_dropped_by_us_and_reported() -> None:
    # filterwarnings=error: ORT's own "provider not available" UserWarning would fail this.
    model = _load(load_profile("qualcomm-qcs6490"))
    assert model.providers == ("CPUExecutionProvider",)
    assert any("QNNExecutionProvider not in this ONNX Runtime build" in n for n in model.notes)


@pytest.mark.parametrize(
    ("profile", "provider"),
    [("ti-am62a", "TIDLExecutionProvider"), ("amd-kria-k26", "VitisAIExecutionProvider")],
)
def test_board_providers_absent_here_fall_back_to_cpu(
    profile: str, provider: str, batch: np.ndarray
) -> None:
    # The CI machine has neither TI's nor AMD's ONNX Runtime build: the board's provider is
    # skipped with a note and the model still answers, from the CPU.
    model = _load(load_profile(profile))
    assert model.providers == ("CPUExecutionProvider",)
    assert any(f"{provider} not in this ONNX Runtime build" in n for n in model.notes)
    np.testing.assert_allclose(model.infer([batch])[0], mlp_reference(batch), rtol=1e-5)


def test_accelerator_required_without_any_accelerator_refuses() -> None:
    profile = make_profile('[{ name = "QNNExecutionProvider" }]', "accelerator_required = true")
    with pytest.raises(BackendError, match="accelerator required"):
        _load(profile)


def test_accelerator_required_sets_disable_cpu_ep_fallback() -> None:
    # Azure EP is real and present but takes no nodes: ORT must refuse the CPU fallback.
    profile = make_profile('[{ name = "AzureExecutionProvider" }]', "accelerator_required = true")
    with pytest.raises(BackendError, match="fallback to CPU EP has been explicitly disabled"):
        _load(profile)


def test_provider_that_takes_no_nodes_is_reported() -> None:
    profile = make_profile(
        '[{ name = "AzureExecutionProvider" }, { name = "CPUExecutionProvider" }]'
    )
    model = _load(profile)
    assert model.providers == ("AzureExecutionProvider", "CPUExecutionProvider")
    assert any("AzureExecutionProvider registered but assigned no nodes" in n for n in model.notes)


def test_unknown_node_placement_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX Runtime 1.23 (Python 3.10's) cannot report which provider took which node."""
    monkeypatch.setattr(onnx_support, "node_placement", lambda _session: {})
    profile = make_profile(
        '[{ name = "AzureExecutionProvider" }, { name = "CPUExecutionProvider" }]'
    )
    model = _load(profile)
    assert any(n.startswith("node placement unknown: ONNX Runtime") for n in model.notes)
    assert not any("assigned no nodes" in n for n in model.notes)


def test_silent_provider_drop_after_creation_is_reported(cpu_profile: DeviceProfile) -> None:
    model = _load(cpu_profile)
    report_fallback(
        model, ["TensorrtExecutionProvider", "CPUExecutionProvider"], cpu_profile.onnxruntime
    )
    assert "silent fallback: requested TensorrtExecutionProvider" in model.notes[-1]


def test_external_data_is_refused(cpu_profile: DeviceProfile, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="external data"):
        _load(cpu_profile, external_data_onnx())


def test_garbage_bytes_fail_clearly(cpu_profile: DeviceProfile) -> None:
    with pytest.raises(BackendError, match="not a valid ONNX model"):
        _load(cpu_profile, b"\x00garbage" * 10)


def test_the_model_contract_refuses_wrong_inputs(
    cpu_profile: DeviceProfile, batch: np.ndarray
) -> None:
    model = _load(cpu_profile)
    with pytest.raises(InputMismatch, match="has no input 'y'"):
        validate(model.inputs, {"x": batch, "y": batch})
    with pytest.raises(InputMismatch, match="expected datatype FP32, got FP64"):
        validate(model.inputs, {"x": batch.astype(np.float64)})
    with pytest.raises(
        InputMismatch, match=r"expected shape \[-1, 16\] \(-1 = any\), got \[5, 3\]"
    ):
        validate(model.inputs, {"x": batch[:, :3]})
    # Unvalidated tensors that reach the backend anyway meet ORT's own check.
    with pytest.raises(BackendError, match="inference failed"):
        model.infer([batch[:, :3]])


def test_declared_signature_must_match(cpu_profile: DeviceProfile) -> None:
    good = ModelSpec("mlp", inputs=[TensorSpec("x", "FP32", (-1, 16))])
    OnnxBackend().load(mlp_onnx(), good, LoadOptions(cpu_profile, host=X86))
    bad = ModelSpec("mlp", inputs=[TensorSpec("x", "FP32", (-1, 32))])
    with pytest.raises(BackendError, match="declared shape"):
        OnnxBackend().load(mlp_onnx(), bad, LoadOptions(cpu_profile, host=X86))
    renamed = ModelSpec("mlp", outputs=[TensorSpec("probs", "FP32", (-1, 8))])
    with pytest.raises(BackendError, match="do not match"):
        OnnxBackend().load(mlp_onnx(), renamed, LoadOptions(cpu_profile, host=X86))


def test_closed_model_refuses(cpu_profile: DeviceProfile, batch: np.ndarray) -> None:
    model = _load(cpu_profile)
    model.close()
    with pytest.raises(BackendError, match="closed"):
        model.infer([batch])


def test_concurrent_infer_is_correct(cpu_profile: DeviceProfile) -> None:
    model = _load(cpu_profile)
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(1 + i % 3, 16)).astype(np.float32) for i in range(64)]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = model.infer([inputs[i]])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        np.testing.assert_allclose(results[i], mlp_reference(x), rtol=1e-5)


def test_bf16_refused_on_x86(cpu_profile: DeviceProfile) -> None:
    with pytest.raises(BackendError, match="ARM64 BF16 fast-math"):
        _load(cpu_profile, precision="bf16")


def test_bf16_mode_keeps_matmul_unfused(batch: np.ndarray) -> None:
    # Posing as Graviton3: the BF16 key is applied (accepted, a no-op on x86) and
    # MatMulAddFusion is disabled so MatMul stays MatMul (Gemm has no BF16 path).
    profile = load_profile("aws-graviton3")
    options = LoadOptions(profile, precision="bf16", host=GRAVITON)
    model = OnnxBackend().load(mlp_onnx(), ModelSpec("mlp"), options)
    assert model.precision == "bf16"
    assert model.node_placement == {"CPUExecutionProvider": 3}  # MatMul, Add, Relu
    assert any("BF16 fast-math" in n for n in model.notes)
    np.testing.assert_allclose(model.infer([batch])[0], mlp_reference(batch), rtol=1e-5)


def test_bf16_typed_model_fails_on_cpu_ep(cpu_profile: DeviceProfile) -> None:
    with pytest.raises(BackendError, match="cannot load the model"):
        _load(cpu_profile, bf16_relu_onnx())


def test_int8_variant_runs_close_to_fp32(
    cpu_profile: DeviceProfile, batch: np.ndarray, tmp_path: Path
) -> None:
    model = _load(cpu_profile, int8_dynamic_onnx(str(tmp_path)), precision="int8")
    assert model.precision == "int8"
    ref = mlp_reference(batch)
    assert np.abs(model.infer([batch])[0] - ref).max() < 0.05 * np.abs(ref).max()


def test_optimized_model_cache_round_trip(
    cpu_profile: DeviceProfile, batch: np.ndarray, tmp_path: Path
) -> None:
    first = _load(cpu_profile, cache_dir=tmp_path)
    assert any("saved to cache" in n for n in first.notes)
    cached = list((tmp_path / "ort-optimized").glob("*.onnx"))
    assert len(cached) == 1
    second = _load(cpu_profile, cache_dir=tmp_path)
    assert any("loaded from cache" in n for n in second.notes)
    np.testing.assert_array_equal(second.infer([batch])[0], first.infer([batch])[0])
    cached[0].write_bytes(cached[0].read_bytes()[:-10])  # torn write: digest no longer matches
    third = _load(cpu_profile, cache_dir=tmp_path)
    assert any("saved to cache" in n for n in third.notes)


def test_cache_key_changes_with_model(cpu_profile: DeviceProfile, tmp_path: Path) -> None:
    _load(cpu_profile, cache_dir=tmp_path)
    _load(cpu_profile, mlp_onnx(opset=18), cache_dir=tmp_path)
    assert len(list((tmp_path / "ort-optimized").glob("*.onnx"))) == 2


def test_ep_context_needs_a_compiling_provider() -> None:
    model = _load(load_profile("qualcomm-qcs6490"))
    assert any("ep.context_enable ignored" in n for n in model.notes)


def test_ep_context_file_is_keyed_by_digest_eps_and_build(tmp_path: Path) -> None:
    """The file ORT writes for a compiling EP is named by the model's signed digest, the EPs
    and ORT's version: another model, EP or build never shares it."""
    options = LoadOptions(load_profile("qualcomm-qcs6490"), host=X86, cache_dir=tmp_path)
    none: dict[str, str] = {}
    qnn = [("QNNExecutionProvider", none), ("CPUExecutionProvider", none)]
    ov = [("OpenVINOExecutionProvider", none), ("CPUExecutionProvider", none)]

    def path(model: tuple[bytes, str | None], eps: list[tuple[str, dict[str, str]]]) -> str:
        _settings, extra = ep_context(model, options, eps, [])
        return extra["ep.context_file_path"]

    first = path((b"model", "a" * 64), qnn)
    assert Path(first).parent == tmp_path / "ep-context"
    assert Path(first).name.startswith("a" * 64 + "-")
    assert path((b"model", "b" * 64), qnn) != first
    assert path((b"model", "a" * 64), ov) != first
    assert path((b"model", "a" * 64), qnn) == first


def _scaled(data: bytes, factor: float) -> bytes:
    """The same graph with its first weight scaled: same I/O, other answers."""
    model = onnx.load_from_string(data)
    first = model.graph.initializer[0]
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) * factor, first.name))
    scaled: bytes = model.SerializeToString()
    return scaled


def test_a_cached_graph_is_bound_to_the_digest_of_the_bytes_loaded(
    cpu_profile: DeviceProfile, batch: np.ndarray, tmp_path: Path
) -> None:
    """The store's `VerifiedBlob` brings its digest (hashed once); that digest is computed from
    the very bytes loaded, so another model never gets this one's optimized graph."""
    a, b = mlp_onnx(), _scaled(mlp_onnx(), 2.0)
    options = LoadOptions(cpu_profile, host=X86, cache_dir=tmp_path)
    backend, spec = OnnxBackend(), ModelSpec("mlp")
    assert any("saved to cache" in n for n in backend.load(VerifiedBlob(a), spec, options).notes)
    plain = backend.load(a, spec, options)  # hashed by the backend: the same digest, a hit
    assert any("loaded from cache" in n for n in plain.notes)
    other = backend.load(VerifiedBlob(b), spec, options)
    assert any("saved to cache" in n for n in other.notes)
    assert not np.allclose(other.infer([batch])[0], plain.infer([batch])[0])
    assert len(list((tmp_path / "ort-optimized").glob("*.onnx"))) == 2

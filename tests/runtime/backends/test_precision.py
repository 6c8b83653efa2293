from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.runtime.backends.conftest import GRAVITON, X86
from tests.runtime.backends.models import fc_tflite, int8_dynamic_onnx, mlp_onnx, mlp_reference
from wasmgate.device_profiles import DeviceProfile, load_profile
from wasmgate.runtime.backends import (
    HostInfo,
    LoadOptions,
    ModelSpec,
    Negotiated,
    create_backend,
    negotiate,
)
from wasmgate.runtime.backends.precision import VariantSource
from wasmgate.runtime.errors import BackendError

SPEC = ModelSpec("mlp")


def _negotiate(
    variants: dict[str, VariantSource], profile: DeviceProfile, host: HostInfo = X86
) -> Negotiated:
    return negotiate(create_backend("onnx"), SPEC, variants, LoadOptions(profile, host=host))


@pytest.fixture
def int8(tmp_path: Path) -> bytes:
    return int8_dynamic_onnx(str(tmp_path))


def test_first_precision_of_the_profile_wins(cpu_profile: DeviceProfile, int8: bytes) -> None:
    result = _negotiate({"fp32": mlp_onnx(), "int8": int8}, cpu_profile)
    assert (result.precision, result.variant) == ("int8", "int8")
    assert result.model.precision == "int8"
    assert [(a.precision, a.loaded) for a in result.attempts] == [("int4", False), ("int8", True)]
    assert result.attempts[0].reason == "bundle ships no int4 variant"


def test_broken_variant_falls_back_with_reason(
    cpu_profile: DeviceProfile, batch: np.ndarray
) -> None:
    result = _negotiate({"fp32": mlp_onnx(), "int8": b"broken"}, cpu_profile)
    assert result.precision == "fp32"
    failed = result.attempts[1]
    assert (failed.precision, failed.loaded) == ("int8", False)
    assert "not a valid ONNX model" in failed.reason
    assert any(n.startswith("int8 skipped: ") for n in result.model.notes)
    assert "; int8: not a valid ONNX model" in result.summary()
    np.testing.assert_allclose(result.model.infer([batch])[0], mlp_reference(batch), rtol=1e-5)


def test_missing_variant_is_recorded(cpu_profile: DeviceProfile) -> None:
    result = _negotiate({"fp32": mlp_onnx()}, cpu_profile)
    assert result.precision == "fp32"
    assert result.attempts[1].reason == "bundle ships no int8 variant"


def test_bf16_on_x86_falls_back_to_next(int8: bytes) -> None:
    result = _negotiate({"fp32": mlp_onnx(), "int8": int8}, load_profile("aws-graviton3"))
    assert result.precision == "int8"
    assert "ARM64 BF16 fast-math" in result.attempts[1].reason


def test_bf16_uses_the_fp32_file_as_a_compute_mode(int8: bytes) -> None:
    result = _negotiate(
        {"fp32": mlp_onnx(), "int8": int8}, load_profile("aws-graviton3"), host=GRAVITON
    )
    assert (result.precision, result.variant) == ("bf16", "fp32")
    assert result.model.precision == "bf16"


def test_variant_outside_the_order_is_a_last_resort(cpu_profile: DeviceProfile) -> None:
    result = _negotiate({"fp16": mlp_onnx()}, cpu_profile)  # fp32-typed, named fp16: loads
    assert result.precision == "fp16"
    assert result.attempts[-1].reason == "not in the profile order; last resort"


def test_nothing_loads_lists_every_reason(cpu_profile: DeviceProfile) -> None:
    with pytest.raises(BackendError, match=r"int8: .*not a valid ONNX.*fp32: .*not a valid"):
        _negotiate({"fp32": b"x", "int8": b"y"}, cpu_profile)
    with pytest.raises(BackendError, match="ships no model variant"):
        _negotiate({}, cpu_profile)


def test_sources_are_read_lazily(cpu_profile: DeviceProfile, int8: bytes) -> None:
    calls: list[str] = []

    def source(name: str, data: bytes) -> VariantSource:
        def read() -> bytes:
            calls.append(name)
            return data

        return read

    _negotiate({"fp32": source("fp32", mlp_onnx()), "int8": source("int8", int8)}, cpu_profile)
    assert calls == ["int8"]


def test_tflite_negotiation(batch: np.ndarray) -> None:
    variants: dict[str, VariantSource] = {
        "fp32": fc_tflite(int8=False),
        "int8": fc_tflite(int8=True),
    }
    options = LoadOptions(load_profile("raspberry-pi-5"), host=X86)
    result = negotiate(create_backend("tflite"), SPEC, variants, options)
    assert result.precision == "int8"
    assert result.model.infer([batch])[0].shape == (5, 8)


@pytest.fixture(scope="module")
def int4(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    from wasmgate.guest_adapters.quantize_int4 import quantize_int4  # noqa: PLC0415

    tmp = tmp_path_factory.mktemp("int4")
    (tmp / "mlp.onnx").write_bytes(mlp_onnx())
    quantize_int4(tmp / "mlp.onnx", tmp / "mlp-int4.onnx", block_size=16)
    return (tmp / "mlp-int4.onnx").read_bytes()


def test_int4_variant_comes_first_on_cpu_profiles(
    cpu_profile: DeviceProfile, int8: bytes, int4: bytes, batch: np.ndarray
) -> None:
    result = _negotiate({"fp32": mlp_onnx(), "int8": int8, "int4": int4}, cpu_profile)
    assert (result.precision, result.variant, result.model.precision) == ("int4", "int4", "int4")
    got = result.model.infer([batch])[0]
    np.testing.assert_allclose(got, mlp_reference(batch), atol=0.35)  # 4-bit weights


def test_int4_variant_that_fails_to_load_falls_back_to_int8(
    cpu_profile: DeviceProfile, int8: bytes, int4: bytes
) -> None:
    # An INT4 file this runtime cannot run (its packed MatMul names an op ORT has no kernel for).
    broken = int4.replace(b"MatMulNBits", b"MatMulNBitz")
    result = _negotiate({"fp32": mlp_onnx(), "int8": int8, "int4": broken}, cpu_profile)
    assert result.precision == "int8"
    assert (result.attempts[0].precision, result.attempts[0].loaded) == ("int4", False)
    assert any(n.startswith("int4 skipped: ") for n in result.model.notes)


def test_npu_profiles_never_try_int4(int8: bytes, int4: bytes) -> None:
    # The QNN profile lists no int4 (MatMulNBits is a CPU-EP kernel) and int4 is no last resort.
    result = _negotiate(
        {"fp32": mlp_onnx(), "int8": int8, "int4": int4}, load_profile("qualcomm-qcs6490")
    )
    assert result.precision == "int8"
    assert all(a.precision != "int4" for a in result.attempts)

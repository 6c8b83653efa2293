"""What `wasmgate profiles` says about this machine beyond the profile text: where the test
models' nodes really run on a profile (`show --placement`), and the devices ONNX Runtime
enumerates (`detect`: `onnxruntime.get_ep_devices()`, ORT >= 1.22, beside the file rules)."""

from __future__ import annotations

import onnxruntime as ort

from wasmgate.device_profiles import DeviceProfile, Precision
from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.backends.onnx_plugins import describe
from wasmgate.runtime.cli._models import load_model
from wasmgate.runtime.errors import BackendError

TEST_MODELS: tuple[tuple[str, Precision], ...] = (
    ("digits-fp32.onnx", "fp32"),
    ("digits-int8.onnx", "int8"),
)


def placement_lines(profile: DeviceProfile) -> list[str]:
    """Per test model and variant: where its nodes run here, and every fallback note."""
    from wasmgate.guest_adapters.examples import models_dir  # noqa: PLC0415

    lines = [f"placement here (onnxruntime {ort.__version__}):"]
    for file, precision in TEST_MODELS:
        try:
            model = load_model(
                (models_dir() / file).read_bytes(), "onnx", file, LoadOptions(profile, precision)
            )
        except (BackendError, OSError) as e:
            lines.append(f"  - {file}: does not load: {e}")
            continue
        lines.append(f"  - {file}: {model.placement or 'unknown'}")
        lines += [f"      {note}" for note in model.notes]
        model.close()
    return lines


def ort_devices() -> list[str]:
    """``EP: device`` per device ONNX Runtime enumerates; empty before ORT 1.22."""
    getter = getattr(ort, "get_ep_devices", None)
    if getter is None:
        return []
    return [f"{d.ep_name}: {describe(d)}" for d in getter()]

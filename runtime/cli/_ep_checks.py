"""`wasmgate doctor`'s placement check: where a test model's nodes really run on this
profile, and, when the profile's accelerator is missing, refuses its options or takes no
node, the fallback in the EP's own words with the fix (an install line, the option to
change).
"""

from __future__ import annotations

from collections.abc import Iterator

from wasmgate.device_profiles import DeviceProfile
from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.backends.onnx_providers import CPU, INSTALL
from wasmgate.runtime.cli._checks import Finding
from wasmgate.runtime.cli._models import load_model
from wasmgate.runtime.errors import BackendError

CHECK = "providers: placement"


def check_placement(profile: DeviceProfile) -> Iterator[Finding]:
    """One finding: ok when every node runs on the profile's first accelerator (or the
    profile wants only the CPU), a warning naming the fallback otherwise."""
    from wasmgate.guest_adapters.examples import models_dir  # noqa: PLC0415

    ort = profile.onnxruntime
    wanted = [p.name for p in ort.providers if p.name != CPU] + [p.ep_name for p in ort.plugins]
    try:
        model = load_model(
            (models_dir() / "digits-fp32.onnx").read_bytes(), "onnx", "doctor", LoadOptions(profile)
        )
    except (BackendError, OSError) as e:
        yield Finding(CHECK, "error", f"the test model does not load: {e}", _fix(wanted, str(e)))
        return
    placement, notes = model.placement or "unknown", "; ".join(model.notes)
    model.close()
    if not wanted:
        yield Finding(
            CHECK, "ok", f"the test model runs on {placement} (the profile wants the CPU)"
        )
    elif placement.startswith(f"{wanted[0]} 100% "):
        yield Finding(CHECK, "ok", f"the test model runs on {placement}")
    else:
        said = f" ({notes})" if notes else ""
        yield Finding(
            CHECK,
            "warn",
            f"fallback: the profile wants {wanted[0]}, the test model runs on {placement}{said}",
            _fix(wanted, notes),
        )


def _fix(wanted: list[str], said: str) -> str:
    for name in wanted:
        if f"{name} not in this ONNX Runtime build" in said and name in INSTALL:
            return INSTALL[name]
    if "not available (OpenVINO sees" in said:
        return "set the profile's device_type to a device OpenVINO sees, or install its driver"
    if "registered, no device" in said:
        return "this machine has no device the plugin drives: pick device_types it offers"
    return "see the notes above; `wasmgate profiles show PROFILE` lists the options in use"

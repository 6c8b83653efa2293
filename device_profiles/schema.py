"""The device-profile schema: one TOML file per hardware kind, validated strictly.

The ONNX Runtime section (``[onnxruntime]``: providers, their options, session config) and
the names it knows are `ort.py`'s.

Every field carries a description in its `msgspec.Meta` (``wasmgate profiles schema`` prints
them all) and unknown keys are refused (`Document`): a typo in a profile must fail loudly,
because ONNX Runtime itself accepts unknown session-config keys silently.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta

from wasmgate.device_profiles.ort import OnnxRuntimeSettings
from wasmgate.typed import Document

Arch = Literal["x86_64", "aarch64"]
Precision = Literal["int4", "int8", "bf16", "fp16", "fp32"]


# kw_only is repeated on every class: msgspec applies it to the fields a class defines, not
# to its subclasses' (and pydantic models never took positional arguments either).
class CpuSpec(Document, kw_only=True):
    arch: Annotated[Arch, Meta(description="CPU architecture as `uname -m` prints it.")]
    features: Annotated[
        list[str],
        Meta(
            description="CPU feature flags that must all be present (x86 `flags` / ARM "
            "`Features` words of /proc/cpuinfo), e.g. `asimddp` for fast INT8 on ARM, `bf16` "
            "for BF16."
        ),
    ] = msgspec.field(default_factory=list)


class TfliteDelegate(Document, kw_only=True):
    name: Annotated[str, Meta(description="Short name used in logs, e.g. `edgetpu`.")]
    library: Annotated[str, Meta(description="Shared library passed to `load_delegate`.")]
    options: Annotated[dict[str, str], Meta(description="Delegate options.")] = msgspec.field(
        default_factory=dict
    )


class TfliteSettings(Document, kw_only=True):
    delegates: Annotated[
        list[TfliteDelegate],
        Meta(
            description="Delegates tried in order; if none loads, the built-in XNNPACK/CPU "
            "path runs."
        ),
    ] = msgspec.field(default_factory=list)
    threads: Annotated[int, Meta(ge=0, description="Interpreter threads (0 = all CPUs).")] = 0


class BatchingCap(Document, kw_only=True):
    max_batch_size: Annotated[
        int, Meta(ge=1, description="Upper bound on any manifest's max_batch_size.")
    ] = 32
    max_queue_delay_us: Annotated[
        int, Meta(ge=0, description="Upper bound on any manifest's max_queue_delay_us.")
    ] = 5000


class DetectionRules(Document, kw_only=True):
    priority: Annotated[
        int, Meta(description="Higher wins among matching profiles (generic profiles use 0).")
    ] = 0
    dt_model: Annotated[
        list[str], Meta(description="Substrings of the device-tree `model` (any matches).")
    ] = msgspec.field(default_factory=list)
    dt_compatible: Annotated[
        list[str], Meta(description="Device-tree `compatible` entries (any matches).")
    ] = msgspec.field(default_factory=list)
    cpu_parts: Annotated[
        list[str], Meta(description="ARM `CPU part` ids, e.g. `0xd40` (any matches).")
    ] = msgspec.field(default_factory=list)
    cpu_flags: Annotated[
        list[str],
        Meta(description="Additional /proc/cpuinfo flags that must all be present to match."),
    ] = msgspec.field(default_factory=list)
    paths: Annotated[
        list[str],
        Meta(description="Glob patterns relative to the root, e.g. `dev/apex_*` (any exists)."),
    ] = msgspec.field(default_factory=list)
    accel_drivers: Annotated[
        list[str],
        Meta(description="Drivers bound under /sys/class/accel/*/device/driver, e.g. `intel_vpu`."),
    ] = msgspec.field(default_factory=list)
    dmi_product: Annotated[
        list[str],
        Meta(
            description="Substrings of /sys/class/dmi/id/product_name or sys_vendor (any matches)."
        ),
    ] = msgspec.field(default_factory=list)

    @property
    def has_identity(self) -> bool:
        """True when the profile needs positive evidence, not only arch and flags."""
        return bool(
            self.dt_model
            or self.dt_compatible
            or self.cpu_parts
            or self.paths
            or self.accel_drivers
            or self.dmi_product
        )


def field_docs(
    model: type[msgspec.Struct] | None = None, prefix: str = ""
) -> list[tuple[str, str, str]]:
    """(dotted path, type, description) of every profile field, nested tables included."""
    kind_of = model or DeviceProfile
    rows = []
    hints = get_type_hints(kind_of, include_extras=True)  # the Meta is in Annotated's extras
    for name in kind_of.__struct_fields__:
        annotation, description = _described(hints[name])
        path, args = f"{prefix}{name}", get_args(annotation)
        if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
            rows.append((path, "table", description))
            rows += field_docs(annotation, f"{path}.")
        elif args and isinstance(args[0], type) and issubclass(args[0], msgspec.Struct):
            rows.append((path, "array of tables", description))
            rows += field_docs(args[0], f"{path}[].")
        else:
            # not args: on 3.10 dict[str, int] is a type too (its __name__ is just 'dict')
            if isinstance(annotation, type) and not args:
                kind = annotation.__name__
            else:
                kind = str(annotation)
            rows.append((path, kind.replace("typing.", ""), description))
    return rows


def _described(hint: object) -> tuple[object, str]:
    """``Annotated[T, Meta(description=...)]`` -> (T, the description; "" if none)."""
    if get_origin(hint) is not Annotated:
        return hint, ""
    kind, *extras = get_args(hint)
    texts = [m.description for m in extras if isinstance(m, Meta) and m.description]
    return kind, texts[0] if texts else ""


class DeviceProfile(Document, kw_only=True):
    # \Z, not $: Python's $ also matches before a final newline, and "x\n" is no file stem.
    name: Annotated[
        str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]*\Z", description="Profile name (file stem).")
    ]
    description: Annotated[str, Meta(description="One line for `wasmgate profiles list`.")]
    cpu: Annotated[CpuSpec, Meta(description="Architecture and required CPU features.")]
    onnxruntime: Annotated[
        OnnxRuntimeSettings, Meta(description="ONNX Runtime providers and options.")
    ]
    tflite: Annotated[TfliteSettings, Meta(description="TFLite/LiteRT settings.")] = msgspec.field(
        default_factory=TfliteSettings
    )
    precision: Annotated[
        list[Precision],
        Meta(
            min_length=1,
            description="Preferred precision order. `bf16` means: run the fp32 (or bf16-named) "
            "variant with BF16 compute (ARM64 fast-math GEMM), not a bf16 tensor type.",
        ),
    ]
    batching: Annotated[BatchingCap, Meta(description="Caps on manifest batching.")] = (
        msgspec.field(default_factory=BatchingCap)
    )
    detect: Annotated[
        DetectionRules, Meta(description="How `wasmgate profiles detect` finds it.")
    ] = msgspec.field(default_factory=DetectionRules)
    unverified: Annotated[
        list[str],
        Meta(
            description="Which values come from vendor documentation and were not run on the "
            "real board (shown by `wasmgate profiles show`)."
        ),
    ] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if len(set(self.precision)) != len(self.precision):
            raise ValueError("precision order lists a precision twice")
        if "bf16" in self.precision and (
            self.cpu.arch != "aarch64" or "bf16" not in self.cpu.features
        ):
            raise ValueError("precision 'bf16' needs cpu.arch aarch64 with feature 'bf16'")

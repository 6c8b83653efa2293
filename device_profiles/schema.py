"""The device-profile schema: one TOML file per hardware kind, validated strictly.

Every field carries a description in its `msgspec.Meta` (``wasmgate profiles schema`` prints
them all) and unknown keys are refused (`Document`): a typo in a profile must fail loudly,
because ONNX Runtime itself accepts unknown session-config keys silently.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta

from wasmgate.typed import BadField, Document

Arch = Literal["x86_64", "aarch64"]
Precision = Literal["int4", "int8", "bf16", "fp16", "fp32"]
GraphOptimization = Literal["disable", "basic", "extended", "layout", "all"]
OptionValue = str | int | float | bool

# Every provider name ONNX Runtime 1.32 knows (`onnxruntime.get_all_providers()`). A profile
# may list providers the installed build lacks (they are dropped at load time and reported),
# but never a name that no build has: that is a typo.
KNOWN_PROVIDERS = frozenset(
    {
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "MIGraphXExecutionProvider",
        "OpenVINOExecutionProvider",
        "DnnlExecutionProvider",
        "VitisAIExecutionProvider",
        "TIDLExecutionProvider",
        "QNNExecutionProvider",
        "NnapiExecutionProvider",
        "VSINPUExecutionProvider",
        "CoreMLExecutionProvider",
        "DmlExecutionProvider",
        "RknpuExecutionProvider",
        "WebGpuExecutionProvider",
        "XnnpackExecutionProvider",
        "CANNExecutionProvider",
        "CPUExecutionProvider",
        # In every PyPI wheel; takes no ONNX nodes. Useful to exercise EP bookkeeping in tests.
        "AzureExecutionProvider",
    }
)

# Session-config keys a profile may set (checked against the ORT 1.32 binary's strings).
# Keys the runtime manages itself are refused here with a pointer to the field that owns them.
KNOWN_SESSION_CONFIG = frozenset(
    {
        "session.intra_op.allow_spinning",
        "session.inter_op.allow_spinning",
        "session.force_spinning_stop",
        "session.dynamic_block_base",
        "session.intra_op_thread_affinities",
        "session.use_env_allocators",
        "session.set_denormal_as_zero",
        "session.x64quantprecision",
        "session.qdqisint8allowed",
        "session.disable_prepacking",
        "session.disable_quant_qdq",
        "mlas.disable_kleidiai",
        "optimization.disable_specified_optimizers",
        "ep.context_enable",
        "ep.context_embed_mode",
    }
)
MANAGED_SESSION_CONFIG = {
    "session.disable_cpu_ep_fallback": "onnxruntime.accelerator_required",
    "mlas.enable_gemm_fastmath_arm64_bfloat16": "precision (list 'bf16')",
    "session.record_ep_graph_assignment_info": "(always on: the runtime reports node placement)",
    "ep.context_file_path": "(derived from the runtime cache directory)",
}

# Provider options we know per EP; unknown keys for these EPs are refused. Other EPs' options
# pass through unchecked (documented in the profile README).
KNOWN_PROVIDER_OPTIONS: dict[str, frozenset[str]] = {
    "CPUExecutionProvider": frozenset(),
    "TensorrtExecutionProvider": frozenset(
        {
            "device_id", "trt_fp16_enable", "trt_int8_enable", "trt_int8_calibration_table_name",
            "trt_dla_enable", "trt_dla_core", "trt_engine_cache_enable", "trt_engine_cache_path",
            "trt_timing_cache_enable", "trt_max_workspace_size", "trt_dump_ep_context_model",
        }
    ),
    "CUDAExecutionProvider": frozenset(
        {"device_id", "gpu_mem_limit", "arena_extend_strategy", "cudnn_conv_algo_search"}
    ),
    "OpenVINOExecutionProvider": frozenset(
        {
            "device_type", "precision", "num_of_threads", "num_streams", "cache_dir",
            "load_config", "enable_qdq_optimizer", "disable_dynamic_shapes",
        }
    ),
    "QNNExecutionProvider": frozenset(
        {
            "backend_type", "backend_path", "htp_performance_mode", "soc_model", "htp_arch",
            "device_id", "enable_htp_fp16_precision", "htp_bf16_enable", "vtcm_mb",
            "htp_graph_finalization_optimization_mode", "offload_graph_io_quantization",
            "profiling_level", "rpc_control_latency",
        }
    ),
    "XnnpackExecutionProvider": frozenset({"intra_op_num_threads"}),
    # TI's onnxruntime build (Processor SDK Edge AI): the fields of its c_api_tidl_options.
    "TIDLExecutionProvider": frozenset(
        {"artifacts_folder", "debug_level", "priority", "max_pre_empt_delay", "core_number"}
    ),
    "VitisAIExecutionProvider": frozenset({"config_file", "cacheDir", "cacheKey", "target"}),
}  # fmt: skip


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


class ExecutionProvider(Document, kw_only=True):
    name: Annotated[
        str, Meta(description="ONNX Runtime provider name, e.g. `QNNExecutionProvider`.")
    ]
    options: Annotated[
        dict[str, OptionValue],
        Meta(description="Provider options passed to ONNX Runtime as strings."),
    ] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in KNOWN_PROVIDERS:
            raise ValueError(f"unknown execution provider {self.name!r}")
        known = KNOWN_PROVIDER_OPTIONS.get(self.name)
        unknown = sorted(set(self.options) - known) if known is not None else []
        if unknown:
            raise ValueError(f"{self.name}: unknown option(s) {', '.join(unknown)}")


class OnnxRuntimeSettings(Document, kw_only=True):
    providers: Annotated[
        list[ExecutionProvider],
        Meta(
            min_length=1,
            description="Execution providers in preference order. At load time the list is "
            "intersected with what the installed ONNX Runtime offers; the rest is reported.",
        ),
    ]
    intra_op_threads: Annotated[
        int, Meta(ge=0, description="Threads inside one operator (0 = one per physical core).")
    ] = 0
    inter_op_threads: Annotated[int, Meta(ge=0, description="Threads across operators.")] = 1
    graph_optimization_level: Annotated[
        GraphOptimization, Meta(description="ORT graph optimization level.")
    ] = "all"
    optimized_model_cache: Annotated[
        bool,
        Meta(
            description="Save the optimized graph in the runtime cache directory (keyed by "
            "model hash, providers, level and ORT version) and load it from there next time."
        ),
    ] = False
    accelerator_required: Annotated[
        bool,
        Meta(
            description="Accelerator-or-fail: sets `session.disable_cpu_ep_fallback=1`, so a "
            "model the accelerator cannot fully take fails to load instead of running on the "
            "CPU. The provider list must then not contain `CPUExecutionProvider`."
        ),
    ] = False
    session_config: Annotated[
        dict[str, str],
        Meta(description="Extra ORT session-config entries (only known keys are accepted)."),
    ] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        # Also runs on `replace` (the ONNX backend derives settings that way): a derived copy
        # cannot smuggle in a key the runtime manages. BadField: the error names the field.
        for key in self.session_config:
            if key in MANAGED_SESSION_CONFIG:
                owner = MANAGED_SESSION_CONFIG[key]
                raise BadField("session_config", f"{key} is managed by the runtime: set {owner}")
            if key not in KNOWN_SESSION_CONFIG:
                raise BadField("session_config", f"unknown session config key {key!r}")
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError("a provider is listed twice")
        if self.accelerator_required and "CPUExecutionProvider" in names:
            raise ValueError(
                "accelerator_required conflicts with CPUExecutionProvider in providers"
            )


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

"""The device-profile schema: one TOML file per hardware kind, validated strictly.

Every field carries a description (``wasmgate profiles schema`` prints them all) and
unknown keys are refused: a typo in a profile must fail loudly, because ONNX Runtime itself
accepts unknown session-config keys silently.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CpuSpec(_Strict):
    arch: Arch = Field(description="CPU architecture as `uname -m` prints it.")
    features: list[str] = Field(
        default_factory=list,
        description="CPU feature flags that must all be present (x86 `flags` / ARM `Features` "
        "words of /proc/cpuinfo), e.g. `asimddp` for fast INT8 on ARM, `bf16` for BF16.",
    )


class ExecutionProvider(_Strict):
    name: str = Field(description="ONNX Runtime provider name, e.g. `QNNExecutionProvider`.")
    options: dict[str, OptionValue] = Field(
        default_factory=dict, description="Provider options passed to ONNX Runtime as strings."
    )

    @model_validator(mode="after")
    def _known(self) -> ExecutionProvider:
        if self.name not in KNOWN_PROVIDERS:
            raise ValueError(f"unknown execution provider {self.name!r}")
        known = KNOWN_PROVIDER_OPTIONS.get(self.name)
        unknown = sorted(set(self.options) - known) if known is not None else []
        if unknown:
            raise ValueError(f"{self.name}: unknown option(s) {', '.join(unknown)}")
        return self


class OnnxRuntimeSettings(_Strict):
    providers: list[ExecutionProvider] = Field(
        min_length=1,
        description="Execution providers in preference order. At load time the list is "
        "intersected with what the installed ONNX Runtime offers; the rest is reported.",
    )
    intra_op_threads: int = Field(
        default=0, ge=0, description="Threads inside one operator (0 = one per physical core)."
    )
    inter_op_threads: int = Field(default=1, ge=0, description="Threads across operators.")
    graph_optimization_level: GraphOptimization = Field(
        default="all", description="ORT graph optimization level."
    )
    optimized_model_cache: bool = Field(
        default=False,
        description="Save the optimized graph in the runtime cache directory (keyed by model "
        "hash, providers, level and ORT version) and load it from there next time.",
    )
    accelerator_required: bool = Field(
        default=False,
        description="Accelerator-or-fail: sets `session.disable_cpu_ep_fallback=1`, so a model "
        "the accelerator cannot fully take fails to load instead of running on the CPU. The "
        "provider list must then not contain `CPUExecutionProvider`.",
    )
    session_config: dict[str, str] = Field(
        default_factory=dict,
        description="Extra ORT session-config entries (only known keys are accepted).",
    )

    @field_validator("session_config")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key in MANAGED_SESSION_CONFIG:
                owner = MANAGED_SESSION_CONFIG[key]
                raise ValueError(f"{key} is managed by the runtime: set {owner}")
            if key not in KNOWN_SESSION_CONFIG:
                raise ValueError(f"unknown session config key {key!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> OnnxRuntimeSettings:
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError("a provider is listed twice")
        if self.accelerator_required and "CPUExecutionProvider" in names:
            raise ValueError(
                "accelerator_required conflicts with CPUExecutionProvider in providers"
            )
        return self


class TfliteDelegate(_Strict):
    name: str = Field(description="Short name used in logs, e.g. `edgetpu`.")
    library: str = Field(description="Shared library passed to `load_delegate`.")
    options: dict[str, str] = Field(default_factory=dict, description="Delegate options.")


class TfliteSettings(_Strict):
    delegates: list[TfliteDelegate] = Field(
        default_factory=list,
        description="Delegates tried in order; if none loads, the built-in XNNPACK/CPU path runs.",
    )
    threads: int = Field(default=0, ge=0, description="Interpreter threads (0 = all CPUs).")


class BatchingCap(_Strict):
    max_batch_size: int = Field(
        default=32, ge=1, description="Upper bound on any manifest's max_batch_size."
    )
    max_queue_delay_us: int = Field(
        default=5000, ge=0, description="Upper bound on any manifest's max_queue_delay_us."
    )


class DetectionRules(_Strict):
    priority: int = Field(
        default=0, description="Higher wins among matching profiles (generic profiles use 0)."
    )
    dt_model: list[str] = Field(
        default_factory=list, description="Substrings of the device-tree `model` (any matches)."
    )
    dt_compatible: list[str] = Field(
        default_factory=list, description="Device-tree `compatible` entries (any matches)."
    )
    cpu_parts: list[str] = Field(
        default_factory=list, description="ARM `CPU part` ids, e.g. `0xd40` (any matches)."
    )
    cpu_flags: list[str] = Field(
        default_factory=list,
        description="Additional /proc/cpuinfo flags that must all be present to match.",
    )
    paths: list[str] = Field(
        default_factory=list,
        description="Glob patterns relative to the root, e.g. `dev/apex_*` (any exists).",
    )
    accel_drivers: list[str] = Field(
        default_factory=list,
        description="Drivers bound under /sys/class/accel/*/device/driver, e.g. `intel_vpu`.",
    )
    dmi_product: list[str] = Field(
        default_factory=list,
        description="Substrings of /sys/class/dmi/id/product_name or sys_vendor (any matches).",
    )

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
    model: type[BaseModel] | None = None, prefix: str = ""
) -> list[tuple[str, str, str]]:
    """(dotted path, type, description) of every profile field, nested tables included."""
    rows = []
    for name, info in (model or DeviceProfile).model_fields.items():
        path, annotation = f"{prefix}{name}", info.annotation
        args = get_args(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.append((path, "table", info.description or ""))
            rows += field_docs(annotation, f"{path}.")
        elif args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            rows.append((path, "array of tables", info.description or ""))
            rows += field_docs(args[0], f"{path}[].")
        else:
            kind = annotation.__name__ if isinstance(annotation, type) else str(annotation)
            rows.append((path, kind.replace("typing.", ""), info.description or ""))
    return rows


class DeviceProfile(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", description="Profile name (file stem).")
    description: str = Field(description="One line for `wasmgate profiles list`.")
    cpu: CpuSpec = Field(description="Architecture and required CPU features.")
    onnxruntime: OnnxRuntimeSettings = Field(description="ONNX Runtime providers and options.")
    tflite: TfliteSettings = Field(
        default_factory=TfliteSettings, description="TFLite/LiteRT settings."
    )
    precision: list[Precision] = Field(
        min_length=1,
        description="Preferred precision order. `bf16` means: run the fp32 (or bf16-named) "
        "variant with BF16 compute (ARM64 fast-math GEMM), not a bf16 tensor type.",
    )
    batching: BatchingCap = Field(
        default_factory=BatchingCap, description="Caps on manifest batching."
    )
    detect: DetectionRules = Field(
        default_factory=DetectionRules, description="How `wasmgate profiles detect` finds it."
    )
    unverified: list[str] = Field(
        default_factory=list,
        description="Which values come from vendor documentation and were not run on the real "
        "board (shown by `wasmgate profiles show`).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DeviceProfile:
        if len(set(self.precision)) != len(self.precision):
            raise ValueError("precision order lists a precision twice")
        if "bf16" in self.precision and (
            self.cpu.arch != "aarch64" or "bf16" not in self.cpu.features
        ):
            raise ValueError("precision 'bf16' needs cpu.arch aarch64 with feature 'bf16'")
        return self

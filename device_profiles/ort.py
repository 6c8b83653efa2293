"""What a device profile may tell ONNX Runtime: providers, their options, session config.

ONNX Runtime accepts unknown provider options and session-config keys silently, so the
profile schema knows them: every provider name ONNX Runtime 1.32 has, the options of the
providers we configure, the session-config keys a profile may set and those the runtime
manages itself (refused with a pointer to the field that owns them). A typo fails the
profile's load, loudly.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from wasmgate.device_profiles.ort_plugins import PluginEp, SelectionPolicy
from wasmgate.typed import BadField, Document

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
            "device_type", "precision", "num_of_threads", "num_streams", "load_config",
            "enable_qdq_optimizer", "disable_dynamic_shapes",
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


# Options the runtime sets itself: a profile's value would put derivatives outside the rules
# that bind them to the signed model (keyed by its digest, the EP and its version, MAC'd).
MANAGED_PROVIDER_OPTIONS: dict[str, dict[str, str]] = {
    "OpenVINOExecutionProvider": {
        "cache_dir": "the runtime keeps OpenVINO's blobs under its cache directory, bound to "
        "the signed model",
    },
}

# Where each EP's option names come from. "tested": CI runs them against the real EP (the
# OpenVINO options in tests/runtime/openvino, with the device swapped to CPU where the
# hardware is absent). Anything else is the source they were taken from, shown as
# `unverified` by `wasmgate profiles show`.
OPTION_SOURCES: dict[str, str] = {
    "CPUExecutionProvider": "tested",
    "AzureExecutionProvider": "tested",
    "OpenVINOExecutionProvider": "tested",
    "TensorrtExecutionProvider": "ONNX Runtime docs, TensorRT EP page (execution-providers/"
    "TensorRT-ExecutionProvider)",
    "CUDAExecutionProvider": "ONNX Runtime docs, CUDA EP page (execution-providers/"
    "CUDA-ExecutionProvider)",
    "QNNExecutionProvider": "ONNX Runtime docs, QNN EP page (execution-providers/"
    "QNN-ExecutionProvider)",
    "XnnpackExecutionProvider": "ONNX Runtime docs, XNNPACK EP page",
    "TIDLExecutionProvider": "TI Processor SDK Edge AI sources (c_api_tidl_options)",
    "VitisAIExecutionProvider": "Vitis AI docs, ONNX Runtime Vitis AI EP page",
    "VSINPUExecutionProvider": "NXP i.MX Machine Learning User's Guide (no options set)",
}
"""Per EP: "tested", or the documentation its option names were taken from."""


def option_source(provider: str) -> str:
    """ "tested", or where the provider's options come from (unverified)."""
    return OPTION_SOURCES.get(provider, "vendor documentation (no source recorded)")


# kw_only is repeated on every class: msgspec applies it to the fields a class defines, not
# to its subclasses' (and pydantic models never took positional arguments either).
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
        managed = MANAGED_PROVIDER_OPTIONS.get(self.name, {})
        for key in sorted(set(self.options) & set(managed)):
            raise ValueError(f"{self.name}: option {key} is managed by the runtime: {managed[key]}")
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
    plugins: Annotated[
        list[PluginEp],
        Meta(
            description="Plugin EP libraries to register (ONNX Runtime >= 1.22), their "
            "devices chosen by type and vendor; tried before `providers`."
        ),
    ] = msgspec.field(default_factory=list)
    selection_policy: Annotated[
        SelectionPolicy | None,
        Meta(
            description="ONNX Runtime's device selection policy among registered EPs' devices "
            "(e.g. `PREFER_NPU`), used when no plugin's `device_types` picked a device."
        ),
    ] = None

    def __post_init__(self) -> None:
        # Also runs on `replace` (the ONNX backend derives settings that way): a derived copy
        # cannot smuggle in a key the runtime manages. BadField: the error names the field.
        for key in self.session_config:
            if key in MANAGED_SESSION_CONFIG:
                owner = MANAGED_SESSION_CONFIG[key]
                raise BadField("session_config", f"{key} is managed by the runtime: set {owner}")
            if key not in KNOWN_SESSION_CONFIG:
                raise BadField("session_config", f"unknown session config key {key!r}")
        for plugin in self.plugins:  # the same option names as the EP's full build
            known = KNOWN_PROVIDER_OPTIONS.get(plugin.ep_name)
            unknown = sorted(set(plugin.options) - known) if known is not None else []
            if unknown:
                raise BadField(
                    "plugins", f"{plugin.ep_name}: unknown option(s) {', '.join(unknown)}"
                )
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError("a provider is listed twice")
        if self.accelerator_required and "CPUExecutionProvider" in names:
            raise ValueError(
                "accelerator_required conflicts with CPUExecutionProvider in providers"
            )

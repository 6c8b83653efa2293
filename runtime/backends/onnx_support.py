"""Helpers for the ONNX Runtime backend: type mapping, external-data refusal, option building."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import onnxruntime as ort

from wasmgate.device_profiles.ort import OnnxRuntimeSettings
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox.models import TensorSpec
from wasmgate.sealed import SealedFile

if TYPE_CHECKING:
    from pathlib import Path

    import onnx

    from wasmgate.runtime.backends.base import LoadOptions
    from wasmgate.signing.derived import DerivedCache

log = logging.getLogger("wasmgate.runtime.backends.onnx")

CHECKS_VERSION = "external-data:1"
"""Part of the optimized-cache key: a cached graph stands for a model that passed these
checks, so a stricter check in a later release must not trust entries saved before it."""

ORT_TYPES = {
    "tensor(float)": "FP32",
    "tensor(float16)": "FP16",
    "tensor(bfloat16)": "BF16",
    "tensor(double)": "FP64",
    "tensor(int8)": "INT8",
    "tensor(uint8)": "UINT8",
    "tensor(int16)": "INT16",
    "tensor(uint16)": "UINT16",
    "tensor(int32)": "INT32",
    "tensor(uint32)": "UINT32",
    "tensor(int64)": "INT64",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}

GRAPH_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": getattr(
        ort.GraphOptimizationLevel,
        "ORT_ENABLE_LAYOUT",
        ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    ),
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

BF16_KEY = "mlas.enable_gemm_fastmath_arm64_bfloat16"
DISABLE_OPTIMIZERS_KEY = "optimization.disable_specified_optimizers"


def tensor_specs(args: list[Any]) -> list[TensorSpec]:
    """ORT NodeArgs -> TensorSpecs with KServe datatypes; symbolic/unknown dims become -1."""
    specs = []
    for arg in args:
        datatype = ORT_TYPES.get(arg.type)
        if datatype is None:
            raise BackendError(f"tensor {arg.name!r} has unsupported type {arg.type}")
        shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
        specs.append(TensorSpec(name=arg.name, datatype=datatype, shape=shape))
    return specs


def refuse_external_data(data: bytes) -> None:
    """ORT resolves external-data locations against the working directory even for bytes:
    a model could make the daemon read arbitrary files. Only self-contained models load."""
    # Imported here: ``onnx`` costs ~10 MB and tens of ms, and a warm start whose graphs come
    # from the optimized cache never needs it (see `CHECKS_VERSION`).
    import onnx  # noqa: PLC0415

    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:
        raise BackendError(f"not a valid ONNX model: {e}") from e
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
            raise BackendError(
                f"model uses external data (tensor {tensor.name!r}); only self-contained "
                "ONNX models can be loaded"
            )
    for function in model.functions:
        for node in function.node:
            for attr in node.attribute:
                for tensor in _attr_tensors(attr):
                    if tensor.data_location == onnx.TensorProto.EXTERNAL:
                        raise BackendError(f"model function uses external data ({tensor.name!r})")


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            yield from _attr_tensors(attr)


def _attr_tensors(attr: onnx.AttributeProto) -> Iterator[onnx.TensorProto]:
    if attr.HasField("t"):
        yield attr.t
    yield from attr.tensors
    if attr.HasField("g"):
        yield from _all_tensors(attr.g)
    for sub in attr.graphs:
        yield from _all_tensors(sub)


def provider_options(options: dict[str, Any]) -> dict[str, str]:
    """ORT wants strings; booleans as lower-case words."""
    return {
        k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in sorted(options.items())
    }


def session_options(
    settings: OnnxRuntimeSettings,
    *,
    bf16: bool,
    optimized_path: str | None,
    extra: dict[str, str] | None = None,
) -> ort.SessionOptions:
    """Session options from the profile. Every key set here is one the schema validated."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = settings.intra_op_threads
    so.inter_op_num_threads = settings.inter_op_threads
    so.graph_optimization_level = GRAPH_LEVELS[settings.graph_optimization_level]
    so.log_severity_level = 3  # errors only: we report fallbacks ourselves
    config = {**settings.session_config, **(extra or {})}
    config["session.record_ep_graph_assignment_info"] = "1"
    if settings.accelerator_required:
        config["session.disable_cpu_ep_fallback"] = "1"
    if bf16:
        config[BF16_KEY] = "1"
        # MatMulAddFusion turns MatMul+Add into Gemm, which has no BF16 path: keep MatMul.
        disabled = [o for o in config.get(DISABLE_OPTIMIZERS_KEY, "").split(",") if o]
        if "MatMulAddFusion" not in disabled:
            disabled.append("MatMulAddFusion")
        config[DISABLE_OPTIMIZERS_KEY] = ",".join(disabled)
    if optimized_path is not None:
        so.optimized_model_filepath = optimized_path
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return so


def cache_key(source: str, providers: list[str], settings: OnnxRuntimeSettings, extra: str) -> str:
    """Optimized graphs are hardware- and build-specific: key by everything that shapes them.

    ``source`` is the model's SHA-256 (hex), hashed once by the caller: a MobileNet-class
    model is 17 MB, and hashing it twice per start was measurable."""
    h = hashlib.sha256(source.encode())
    what = (providers, settings.graph_optimization_level, ort.__version__, CHECKS_VERSION, extra)
    h.update(repr(what).encode())
    return h.hexdigest()


def open_session(
    model: bytes | SealedFile, so: ort.SessionOptions, providers: list[tuple[str, dict[str, str]]]
) -> ort.InferenceSession:
    """``ort.InferenceSession`` of ``model`` that does not keep its bytes alive.

    ORT's Python session holds the bytes it was built from for its whole life (its own
    TODO: "holding the memory indefinitely"): a 17 MB model stayed resident twice. From a
    sealed memfd the session keeps only a path: ORT reads the file once, then it is closed.
    The seals keep the bytes ORT reads the verified ones. Without memfd (another OS, a
    seccomp filter) the bytes are passed as before. A :class:`SealedFile` given stays the
    caller's to close."""
    if isinstance(model, SealedFile):
        return _from_sealed(model, so, providers)
    with SealedFile.from_bytes(model) as sealed:
        return _from_sealed(sealed, so, providers)


def _from_sealed(
    sealed: SealedFile, so: ort.SessionOptions, providers: list[tuple[str, dict[str, str]]]
) -> ort.InferenceSession:
    path = sealed.path
    return ort.InferenceSession(sealed.data if path is None else path, so, providers=providers)


def node_placement(session: ort.InferenceSession) -> dict[str, int]:
    """Nodes per EP after partitioning (needs session.record_ep_graph_assignment_info=1)."""
    counts: dict[str, int] = {}
    getter = getattr(session, "get_provider_graph_assignment_info", None)
    if getter is None:
        return counts
    try:
        for subgraph in getter():
            counts[subgraph.ep_name] = counts.get(subgraph.ep_name, 0) + len(subgraph.get_nodes())
    except Exception:
        return {}
    return counts


def bf16_mode(options: LoadOptions) -> bool:
    if options.precision != "bf16":
        return False
    host = options.resolved_host()
    if not host.bf16_fastmath:
        raise BackendError(
            "bf16 compute needs ONNX Runtime's ARM64 BF16 fast-math GEMM (Linux aarch64 with "
            f"FEAT_BF16); this host is {host.system} {host.machine}"
            + ("" if "bf16" in host.cpu_flags else " without bf16")
        )
    return True


def model_sha256(model: tuple[bytes, str | None]) -> str:
    """The SHA-256 of ``model`` (bytes, digest or None): the bundle store's, computed from
    these very bytes when it verified them (`VerifiedBlob`), so a derivative stays bound to
    the verified source without a second pass over a model of many MB; else computed here."""
    data, digest = model
    return digest if digest is not None else hashlib.sha256(data).hexdigest()


def save_optimized(cache: DerivedCache, name: str, source: str, key: str, tmp: Path) -> None:
    """Bind the graph ORT wrote to ``tmp`` to its source and options (a MAC), then drop tmp."""
    try:
        cache.store(name, source, key, tmp.read_bytes())
    except OSError as e:
        log.warning("could not save optimized graph %s: %s", name, e)
    finally:
        tmp.unlink(missing_ok=True)

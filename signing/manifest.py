"""The bundle manifest: a strict typed model of ``manifest.json``.

Invariants:
- Unknown fields are refused at every level (``Document``: ``forbid_unknown_fields``); types
  are strict (no ``"3"`` for ``3``, no ``true`` for ``1``; ``convert``); duplicate JSON keys
  and NaN are refused before validation (``loads_strict``).
- File names (keys of ``files``, ``adapter.file``, model variants) are plain names matching
  :data:`FILE_NAME_RE`: no ``/``, no ``..``, no leading dot. They name archive members and
  blobs are looked up by their SHA-256, so a name never becomes a filesystem path.
- Every file referenced by ``adapter`` or a model variant is listed in ``files``.
- ``routes.http``/``routes.mqtt`` default to the bundle name; ``issued_at < expires``.
- The manifest is only parsed after its signature has verified (see ``store.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from wasmgate.signing.envelope import EnvelopeFormatError, Instant, KeyId, loads_strict
from wasmgate.signing.errors import ManifestError
from wasmgate.signing.variables import Value, Variable, check_declarations
from wasmgate.typed import Document, Invalid, convert

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"  # \Z, not $: see envelope.py
FILE_NAME_RE = NAME_RE
VERSION_RE = r"^\d{1,6}\.\d{1,6}\.\d{1,6}\Z"
MAX_FILES = 256
Name = Annotated[str, Meta(pattern=NAME_RE)]
FileName = Annotated[str, Meta(pattern=FILE_NAME_RE)]
Precision = Literal["fp32", "int8", "int4", "bf16", "fp16"]
Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "BYTES",
]  # fmt: skip
"""The KServe V2 datatype names, in the spec's order: the one list every layer uses (the
sandbox maps each to its numpy dtype and checks at import that it maps exactly these)."""
DATATYPE_NAMES: tuple[str, ...] = get_args(Datatype)
ParamValue = Value


class FileEntry(Document, kw_only=True):
    """A listed file: its SHA-256 (hex) and size in bytes."""

    sha256: KeyId
    size: Annotated[int, Meta(ge=0)]


class TensorSig(Document, kw_only=True):
    """One model input or output: name, KServe V2 datatype, shape (-1 = dynamic)."""

    name: Annotated[str, Meta(min_length=1, max_length=128)]
    datatype: Datatype
    shape: Annotated[list[Annotated[int, Meta(ge=-1)]], Meta(max_length=16)]


class Batching(Document, kw_only=True):
    """Dynamic batching settings of one model."""

    max_batch_size: Annotated[int, Meta(ge=1, le=4096)] = 1
    max_queue_delay_us: Annotated[int, Meta(ge=0, le=10_000_000)] = 0


Tensors = Annotated[list[TensorSig], Meta(max_length=64)]


class ModelEntry(Document, kw_only=True):
    """A declared model with its precision variants (archive file names)."""

    name: Name
    format: Literal["onnx", "tflite"]
    variants: Annotated[dict[Precision, FileName], Meta(min_length=1)]
    inputs: Tensors = msgspec.field(default_factory=list)
    outputs: Tensors = msgspec.field(default_factory=list)
    batching: Batching = msgspec.field(default_factory=Batching)


class AdapterEntry(Document, kw_only=True):
    """The adapter module: archive file name and instance mode."""

    file: FileName
    mode: Literal["fresh", "pooled"] = "fresh"


class Routes(Document, kw_only=True):
    """Names under which the bundle is reachable; both default to the bundle name."""

    http: Name | None = None
    mqtt: Name | None = None


class Release(Document, kw_only=True):
    """Metric gates of a staged release (``[release]``); every field optional.

    When ``window_s`` has passed and at least ``min_requests`` reached the candidate, the
    runtime promotes it if its error share is at most ``max_error_share`` and its p99
    latency at most ``max_p99_ratio`` times the serving version's; else it aborts it.
    The operator's stage request can only tighten these (see :meth:`tightened`).
    Bounds hold only through ``convert`` (msgspec checks none on direct construction).
    """

    min_requests: Annotated[int, Meta(ge=1, le=10**9)] | None = None
    max_error_share: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    max_p99_ratio: Annotated[float, Meta(gt=0.0, le=1000.0)] | None = None
    window_s: Annotated[float, Meta(gt=0.0, le=30 * 86400.0)] | None = None

    def any(self) -> bool:
        """True if at least one gate is set."""
        return any(v is not None for v in msgspec.structs.astuple(self))

    def tightened(self, other: Release) -> Release:
        """The stricter of ``self`` and ``other`` gate by gate (None = not set)."""

        def pick(a: float | None, b: float | None, stricter: Any) -> Any:
            return b if a is None else a if b is None else stricter(a, b)

        return Release(
            min_requests=pick(self.min_requests, other.min_requests, max),
            max_error_share=pick(self.max_error_share, other.max_error_share, min),
            max_p99_ratio=pick(self.max_p99_ratio, other.max_p99_ratio, min),
            window_s=pick(self.window_s, other.window_s, max),
        )


class Limits(Document, kw_only=True):
    """Resource limits the sandbox and runtime enforce for this bundle."""

    memory_mb: Annotated[int, Meta(ge=1, le=65536)] = 64
    deadline_ms: Annotated[int, Meta(ge=1, le=3_600_000)] = 1000
    fuel: Annotated[int, Meta(gt=0)] | None = None
    max_input_bytes: Annotated[int, Meta(gt=0)] = 1024 * 1024
    max_output_bytes: Annotated[int, Meta(gt=0)] = 1024 * 1024
    max_in_flight: Annotated[int, Meta(gt=0)] = 4
    queue_size: Annotated[int, Meta(ge=0)] = 16
    weight: Annotated[int, Meta(ge=1, le=1000)] = 1
    """Share of the worker pool relative to other tenants (each adapter and each model
    of the bundle is one tenant); the daemon caps it at ``limits.max_weight``."""


class Targets(Document, kw_only=True):
    """Device profiles and CPU architectures the bundle targets (empty = any)."""

    profiles: Annotated[list[Name], Meta(max_length=64)] = msgspec.field(default_factory=list)
    arch: Annotated[list[Name], Meta(max_length=16)] = msgspec.field(default_factory=list)


class Fallback(Document, kw_only=True):
    """Cloud fallback policy; every switch is off by default."""

    allowed: bool = False
    on_error: bool = False
    on_busy: bool = False
    on_deadline: bool = False
    on_missing_model: bool = False
    on_adapter_request: bool = False
    send_payload: bool = False
    defer: bool = False
    """With ``send_payload``: when the cloud cannot be reached, an adapter request that had
    no local answer is kept on the gateway and sent when the cloud is back (its answer is
    published on MQTT); the client is told at once that it was deferred."""


class StateGrant(Document, kw_only=True):
    """``[state]``: the adapter may keep a key-value store (absent = no state granted).

    ``max_bytes`` counts keys plus values of every live entry; ``max_keys`` the entries."""

    max_bytes: Annotated[int, Meta(ge=1, le=64 * 1024 * 1024)]
    max_keys: Annotated[int, Meta(ge=1, le=100_000)]


class SamplesGrant(Document, kw_only=True):
    """``[samples]``: hard examples (low confidence, cloud disagreement) may be kept on the
    gateway and shipped for retraining. Absent or ``keep_payload = false``: nothing is kept.
    The daemon's config ``[samples]`` may only tighten these (lower rate and caps)."""

    keep_payload: bool = False
    """The device payload may be kept on disk and leave the gateway with its answers."""
    rate: Annotated[float, Meta(ge=0, le=1)] = 1.0
    """Share of the eligible requests kept (0..1, drawn at random per request)."""
    max_per_hour: Annotated[int, Meta(ge=0, le=1_000_000)] = 60
    """Samples kept at most per rolling hour for this adapter."""
    max_bytes: Annotated[int, Meta(ge=1, le=16 * 1024 * 1024)] = 64 * 1024
    """Largest sample kept (payload plus both answers); a larger one is skipped and counted."""


class SelfTest(Document, kw_only=True):
    """A payload run once after loading; ``expect_status`` is the guest status expected."""

    payload_b64: Annotated[str, Meta(max_length=1024 * 1024)]
    expect_status: Annotated[int, Meta(ge=0, le=2)] = 0


class Manifest(Document, kw_only=True):
    """The signed bundle manifest (``manifest.json``)."""

    name: Name
    version: Annotated[int, Meta(ge=0, le=2**53)]
    description: Annotated[str, Meta(max_length=2000)] = ""
    issued_at: Instant
    expires: Instant
    key_id: KeyId
    files: Annotated[dict[FileName, FileEntry], Meta(max_length=MAX_FILES)]
    adapter: AdapterEntry | None = None
    models: Annotated[list[ModelEntry], Meta(max_length=64)] = msgspec.field(default_factory=list)
    routes: Routes = msgspec.field(default_factory=Routes)
    limits: Limits = msgspec.field(default_factory=Limits)
    targets: Targets = msgspec.field(default_factory=Targets)
    min_daemon_version: Annotated[str, Meta(pattern=VERSION_RE)] = "0.0.0"
    fallback: Fallback = msgspec.field(default_factory=Fallback)
    params: Annotated[dict[Name, ParamValue], Meta(max_length=256)] = msgspec.field(
        default_factory=dict
    )
    selftest: SelfTest | None = None
    release: Release | None = None
    """None (not written) when the bundle declares no gates, so older daemons still parse it."""
    state: StateGrant | None = None
    """None (not written): the adapter's ``state_*`` calls answer "not granted"."""
    samples: SamplesGrant | None = None
    """None (not written): no sample of this bundle's requests is ever kept."""
    variables: Annotated[dict[Name, Variable], Meta(max_length=256)] | None = None
    """The params an operator may override per site; None (not written): none may."""

    def __post_init__(self) -> None:
        referenced = [self.adapter.file] if self.adapter else []
        for m in self.models:
            referenced.extend(m.variants.values())
        missing = sorted(set(referenced) - set(self.files))
        if missing:
            raise ValueError(f"referenced but not listed in files: {', '.join(missing)}")
        names = [m.name for m in self.models]
        if len(names) != len(set(names)):
            raise ValueError("model names must be unique")
        if self.issued_at >= self.expires:
            raise ValueError("issued_at must be before expires")
        check_declarations(self.variables or {}, self.params)
        if self.routes.http is None or self.routes.mqtt is None:
            routes = Routes(http=self.routes.http or self.name, mqtt=self.routes.mqtt or self.name)
            msgspec.structs.force_setattr(self, "routes", routes)  # frozen: set while built

    def file_digest(self, path: str) -> str:
        """The SHA-256 (hex) of listed file ``path``; ``KeyError`` if it is not listed."""
        return self.files[path].sha256

    def variable_defaults(self) -> dict[str, ParamValue]:
        """Each declared variable's default (checked when the manifest was parsed)."""
        return check_declarations(self.variables or {}, self.params)

    def label(self) -> str:
        """``name@version``, used in error messages."""
        return f"{self.name}@{self.version}"

    def total_size(self) -> int:
        """Sum of the declared sizes of all listed files."""
        return sum(f.size for f in self.files.values())

    def is_expired(self, now: datetime) -> bool:
        """True iff ``expires`` is not after ``now``."""
        return self.expires <= now


def parse_manifest(data: bytes, bundle: str) -> Manifest:
    """Parse and validate manifest bytes; :class:`ManifestError` names the first problem."""
    try:
        return convert(loads_strict(data), Manifest, whole="manifest")
    except (EnvelopeFormatError, Invalid) as e:
        raise ManifestError(bundle, f"manifest.json: {e}") from e


def manifest_from_dict(data: dict[str, object], bundle: str) -> Manifest:
    """Validate a manifest given as Python data (used by the builder)."""
    try:
        return convert(data, Manifest, whole="manifest")
    except Invalid as e:
        raise ManifestError(bundle, str(e)) from e

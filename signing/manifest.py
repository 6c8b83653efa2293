"""The bundle manifest: a strict typed model of ``manifest.json``.

Invariants:
- Unknown fields are refused at every level (``extra="forbid"``); types are strict (no
  ``"3"`` for ``3``); duplicate JSON keys are refused before validation.
- File names (keys of ``files``, ``adapter.file``, model variants) are plain names matching
  :data:`FILE_NAME_RE`: no ``/``, no ``..``, no leading dot. They name archive members and
  blobs are looked up by their SHA-256, so a name never becomes a filesystem path.
- Every file referenced by ``adapter`` or a model variant is listed in ``files``.
- ``routes.http``/``routes.mqtt`` default to the bundle name; ``issued_at < expires``.
- The manifest is only parsed after its signature has verified (see ``store.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from wasmgate.signing.envelope import HEX64, EnvelopeFormatError, first_error, loads_strict
from wasmgate.signing.errors import ManifestError
from wasmgate.signing.variables import Value, Variable, check_declarations

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
FILE_NAME_RE = NAME_RE
MAX_FILES = 256
Name = Annotated[str, Field(pattern=NAME_RE)]
FileName = Annotated[str, Field(pattern=FILE_NAME_RE)]
Precision = Literal["fp32", "int8", "int4", "bf16", "fp16"]
Datatype = Literal[
    "FP32", "FP16", "BF16", "FP64", "INT8", "UINT8", "INT16", "INT32", "INT64", "BOOL", "BYTES"
]
ParamValue = Value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FileEntry(_Strict):
    """A listed file: its SHA-256 (hex) and size in bytes."""

    sha256: str = Field(pattern=HEX64)
    size: int = Field(ge=0)


class TensorSig(_Strict):
    """One model input or output: name, KServe V2 datatype, shape (-1 = dynamic)."""

    name: str = Field(min_length=1, max_length=128)
    datatype: Datatype
    shape: list[Annotated[int, Field(ge=-1)]] = Field(max_length=16)


class Batching(_Strict):
    """Dynamic batching settings of one model."""

    max_batch_size: int = Field(default=1, ge=1, le=4096)
    max_queue_delay_us: int = Field(default=0, ge=0, le=10_000_000)


class ModelEntry(_Strict):
    """A declared model with its precision variants (archive file names)."""

    name: Name
    format: Literal["onnx", "tflite"]
    variants: dict[Precision, FileName] = Field(min_length=1)
    inputs: list[TensorSig] = Field(default_factory=list, max_length=64)
    outputs: list[TensorSig] = Field(default_factory=list, max_length=64)
    batching: Batching = Field(default_factory=Batching)


class AdapterEntry(_Strict):
    """The adapter module: archive file name and instance mode."""

    file: FileName
    mode: Literal["fresh", "pooled"] = "fresh"


class Routes(_Strict):
    """Names under which the bundle is reachable; both default to the bundle name."""

    http: Name | None = None
    mqtt: Name | None = None


class Release(_Strict):
    """Metric gates of a staged release (``[release]``); every field optional.

    When ``window_s`` has passed and at least ``min_requests`` reached the candidate, the
    runtime promotes it if its error share is at most ``max_error_share`` and its p99
    latency at most ``max_p99_ratio`` times the serving version's; else it aborts it.
    The operator's stage request can only tighten these (see :meth:`tightened`).
    """

    min_requests: int | None = Field(default=None, ge=1, le=10**9)
    max_error_share: float | None = Field(default=None, ge=0.0, le=1.0)
    max_p99_ratio: float | None = Field(default=None, gt=0.0, le=1000.0)
    window_s: float | None = Field(default=None, gt=0.0, le=30 * 86400.0)

    def any(self) -> bool:
        """True if at least one gate is set."""
        return any(v is not None for v in self.model_dump().values())

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


class Limits(_Strict):
    """Resource limits the sandbox and runtime enforce for this bundle."""

    memory_mb: int = Field(default=64, ge=1, le=65536)
    deadline_ms: int = Field(default=1000, ge=1, le=3_600_000)
    fuel: int | None = Field(default=None, gt=0)
    max_input_bytes: int = Field(default=1024 * 1024, gt=0)
    max_output_bytes: int = Field(default=1024 * 1024, gt=0)
    max_in_flight: int = Field(default=4, gt=0)
    queue_size: int = Field(default=16, ge=0)
    weight: int = Field(default=1, ge=1, le=1000)
    """Share of the worker pool relative to other tenants (each adapter and each model
    of the bundle is one tenant); the daemon caps it at ``limits.max_weight``."""


class Targets(_Strict):
    """Device profiles and CPU architectures the bundle targets (empty = any)."""

    profiles: list[Name] = Field(default_factory=list, max_length=64)
    arch: list[Name] = Field(default_factory=list, max_length=16)


class Fallback(_Strict):
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


class StateGrant(_Strict):
    """``[state]``: the adapter may keep a key-value store (absent = no state granted).

    ``max_bytes`` counts keys plus values of every live entry; ``max_keys`` the entries."""

    max_bytes: int = Field(ge=1, le=64 * 1024 * 1024)
    max_keys: int = Field(ge=1, le=100_000)


class SamplesGrant(_Strict):
    """``[samples]``: hard examples (low confidence, cloud disagreement) may be kept on the
    gateway and shipped for retraining. Absent or ``keep_payload = false``: nothing is kept.
    The daemon's config ``[samples]`` may only tighten these (lower rate and caps)."""

    keep_payload: bool = False
    """The device payload may be kept on disk and leave the gateway with its answers."""
    rate: float = Field(default=1.0, ge=0, le=1)
    """Share of the eligible requests kept (0..1, drawn at random per request)."""
    max_per_hour: int = Field(default=60, ge=0, le=1_000_000)
    """Samples kept at most per rolling hour for this adapter."""
    max_bytes: int = Field(default=64 * 1024, ge=1, le=16 * 1024 * 1024)
    """Largest sample kept (payload plus both answers); a larger one is skipped and counted."""


class SelfTest(_Strict):
    """A payload run once after loading; ``expect_status`` is the guest status expected."""

    payload_b64: str = Field(max_length=1024 * 1024)
    expect_status: int = Field(default=0, ge=0, le=2)


class Manifest(_Strict):
    """The signed bundle manifest (``manifest.json``)."""

    name: Name
    version: int = Field(ge=0, le=2**53)
    description: str = Field(default="", max_length=2000)
    issued_at: AwareDatetime
    expires: AwareDatetime
    key_id: str = Field(pattern=HEX64)
    files: dict[FileName, FileEntry] = Field(max_length=MAX_FILES)
    adapter: AdapterEntry | None = None
    models: list[ModelEntry] = Field(default_factory=list, max_length=64)
    routes: Routes = Field(default_factory=Routes)
    limits: Limits = Field(default_factory=Limits)
    targets: Targets = Field(default_factory=Targets)
    min_daemon_version: str = Field(default="0.0.0", pattern=r"^\d{1,6}\.\d{1,6}\.\d{1,6}$")
    fallback: Fallback = Field(default_factory=Fallback)
    params: dict[Name, ParamValue] = Field(default_factory=dict, max_length=256)
    selftest: SelfTest | None = None
    release: Release | None = None
    """None (not written) when the bundle declares no gates, so older daemons still parse it."""
    state: StateGrant | None = None
    """None (not written): the adapter's ``state_*`` calls answer "not granted"."""
    samples: SamplesGrant | None = None
    """None (not written): no sample of this bundle's requests is ever kept."""
    variables: dict[Name, Variable] | None = Field(default=None, max_length=256)
    """The params an operator may override per site; None (not written): none may."""

    @model_validator(mode="after")
    def _check(self) -> Self:
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
            return self.model_copy(update={"routes": routes})
        return self

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
        loads_strict(data)
        return Manifest.model_validate_json(data)
    except EnvelopeFormatError as e:
        raise ManifestError(bundle, f"manifest.json: {e}") from e
    except ValidationError as e:
        raise ManifestError(bundle, f"manifest.json: {first_error(e, 'manifest')}") from e


def manifest_from_dict(data: dict[str, object], bundle: str) -> Manifest:
    """Validate a manifest given as Python data (used by the builder)."""
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise ManifestError(bundle, first_error(e, "manifest")) from e

"""The daemon's config sections for what it keeps and runs on this gateway: where its files
live (``[paths]``), its ceilings (``[limits]``), the store-and-forward queue (``[store]``),
the hard examples it keeps (``[samples]``), bundle trust (``[trust]``), fleet membership
(``[fleet]``) and logging (``[log]``). `wasmgate.runtime.ops.config` puts them together.

As in `config_network`: the docstrings are the documentation (msgspec does not read them),
`msgspec.Meta` bounds are checked when a config is loaded, and patterns end in ``\\Z``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from wasmgate.typed import BadField, Document


def default_data_dir() -> Path:
    """``/var/lib/wasmgate`` for root, else ``$XDG_DATA_HOME/wasmgate``."""
    if os.geteuid() == 0:
        return Path("/var/lib/wasmgate")
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "wasmgate"


class PathSettings(Document):
    data_dir: Path = msgspec.field(default_factory=default_data_dir)
    """Root for bundles, state and caches unless the paths below are set."""
    bundle_dir: Path | None = None
    """Directory watched for ``*.wgb`` bundles; default ``<data_dir>/bundles``."""
    state_dir: Path | None = None
    """Blob store, anti-rollback state; default ``<data_dir>/state``."""
    cache_dir: Path | None = None
    """Compiled-module and optimized-model cache; default ``<data_dir>/cache``."""
    trust_file: Path | None = None
    """Trust store file; default ``<data_dir>/trust.json``."""

    def resolved(self, name: Literal["bundle_dir", "state_dir", "cache_dir"]) -> Path:
        value: Path | None = getattr(self, name)
        default = {"bundle_dir": "bundles", "state_dir": "state", "cache_dir": "cache"}[name]
        return value if value is not None else self.data_dir / default

    def resolved_trust_file(self) -> Path:
        return self.trust_file if self.trust_file is not None else self.data_dir / "trust.json"

    def effective(self) -> dict[str, str]:
        """Every path as the daemon uses it (defaults resolved): ``/v1/status``'s ``paths``,
        which `wasmgate doctor` reads to check the running daemon's files, not its own."""
        dirs = {n: str(self.resolved(n)) for n in ("bundle_dir", "state_dir", "cache_dir")}
        return {
            "data_dir": str(self.data_dir),
            **dirs,
            "trust_file": str(self.resolved_trust_file()),
        }


class LimitSettings(Document):
    """Daemon-wide ceilings. A manifest may ask for less, never for more."""

    max_bundle_bytes: Annotated[int, Meta(gt=0)] = 512 * 1024 * 1024
    """Largest bundle file accepted (checked before anything is read)."""
    max_module_bytes: Annotated[int, Meta(gt=0)] = 64 * 1024 * 1024
    """Largest adapter .wasm accepted."""
    compile_timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 60.0
    """Time one adapter's compile to native code may take. Adapters compile in a child
    process that is killed when this is spent, and the bundle is refused; other installs go
    on meanwhile. A few KiB of pathological wasm can compile for minutes."""
    compile_memory_mb: Annotated[int, Meta(gt=0)] = 1024
    """Memory the compile child process may allocate, in MiB (beyond it the bundle is
    refused)."""
    memory_mb: Annotated[int, Meta(gt=0)] = 256
    """Ceiling on one guest instance's linear memory, in MiB."""
    deadline_ms: Annotated[int, Meta(gt=0)] = 10_000
    """Ceiling on one request's wall-clock deadline, in milliseconds."""
    fuel: Annotated[int, Meta(gt=0)] | None = None
    """Ceiling on fuel per request when a manifest asks for fuel; None = manifest's value."""
    max_output_bytes: Annotated[int, Meta(gt=0)] = 4 * 1024 * 1024
    """Ceiling on an adapter's answer size."""
    max_log_bytes: Annotated[int, Meta(ge=0)] = 64 * 1024
    """Captured guest stdout/stderr per request, beyond which it is cut."""
    max_in_flight: Annotated[int, Meta(gt=0)] = 64
    """Ceiling on concurrently running requests per adapter."""
    queue_size: Annotated[int, Meta(ge=0)] = 256
    """Ceiling on requests waiting per adapter before 'busy'."""
    workers: Annotated[int, Meta(ge=0)] = 0
    """Worker threads for guests and models; 0 = 2 x CPU count. Read at start (a reload
    keeps the running count)."""
    spare_instances: Annotated[int, Meta(ge=0, le=64)] = 2
    """Fresh-mode adapters: instances started (instantiated, ``_initialize`` run) off the
    request path after a request, each handed to exactly one later request; 0 = every
    request instantiates on its own path. Isolation is the same either way."""
    max_weight: Annotated[int, Meta(ge=1, le=1000)] = 16
    """Ceiling on a manifest's ``limits.weight``. Each adapter and each directly served model
    is a tenant of the worker pool; a free worker takes the next job of the tenant that has
    had the least worker time per unit of weight, and a tenant holds at most its share of the
    workers (its weight over the total weight of the tenants seen in the last second), so a
    busy tenant cannot push the others below their share."""
    max_tenant_workers: Annotated[int, Meta(ge=0)] = 0
    """Most workers one tenant may hold at once; 0 = all but one (at least one), which keeps
    a worker free for the other tenants however slow the busy tenant's requests are."""
    batch_workers: Annotated[int, Meta(ge=0)] = 0
    """Threads that run the batches of every batched model together (one pool per daemon,
    not a thread per model); 0 = CPU count. Read at start, like ``workers``."""
    max_batch_size: Annotated[int, Meta(gt=0)] = 64
    """Ceiling on a model's dynamic batch size."""


class StreamSettings(Document):
    """Limits of one store stream (``[store.streams.<name>]``)."""

    max_bytes: Annotated[int, Meta(gt=0)] = 64 * 1024 * 1024
    """Bytes (payloads plus metadata) the stream keeps at most; beyond, the oldest entries
    are dropped and counted (``wasmgate_store_dropped_total{reason="full"}``)."""
    max_age_s: Annotated[float, Meta(ge=0)] = 7 * 86400
    """Entries older than this are dropped and counted (``reason="expired"``); 0 = kept
    until delivered or pushed out by ``max_bytes``."""


class StoreSettings(Document):
    """The on-disk store-and-forward queue (SQLite in WAL mode, one file)."""

    path: Path | None = None
    """The store's SQLite file; default ``<state_dir>/store.db``."""
    sync: Literal["normal", "full"] = "normal"
    """``normal``: every stored entry survives a crash or SIGKILL of the daemon; an OS crash
    or power cut may lose the last fraction of a second. ``full``: an fsync per commit, also
    power-safe, slower on slow flash (measured in ``bench/bench_store.py``)."""
    defaults: StreamSettings = StreamSettings()
    """Limits of every stream not named in ``streams``."""
    streams: dict[str, StreamSettings] = msgspec.field(default_factory=dict)
    """Per-stream limits by name: ``answers`` (MQTT answers while the broker is away),
    ``events`` (every adapter event on its way to MQTT), ``cloud`` (deferred cloud
    fallbacks), ``samples`` (hard examples kept for retraining). An unknown name is refused
    at start."""
    drain_rate: Annotated[float, Meta(gt=0)] = 200.0
    """Stored entries published per second at most while draining a backlog, so a drain
    never starves live answers of the link."""
    drain_window: Annotated[int, Meta(ge=1, le=65535)] = 32
    """Stored entries sent and not yet acknowledged by the broker at most (in-flight
    window of the drain)."""

    def limits_of(self, stream: str) -> StreamSettings:
        return self.streams.get(stream, self.defaults)


_OCI_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI_REPOSITORY = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])"
    rf"(?::[0-9]{{1,5}})?/{_OCI_COMPONENT}(?:/{_OCI_COMPONENT})*"
)
"""distribution's grammar of ``HOST[:PORT]/REPO`` (as ``oci.ocitypes`` parses references)."""


class SamplesSettings(Document):
    """Hard examples kept for retraining (``[samples]``): these only tighten what each
    bundle's manifest ``[samples]`` allows; they can never let a bundle keep more."""

    enabled: bool = True
    """False: no sample is kept, whatever the manifests allow."""
    rate: Annotated[float, Meta(ge=0, le=1)] = 1.0
    """Ceiling on every manifest's ``rate`` (the lower of the two applies)."""
    max_per_hour: Annotated[int, Meta(ge=0)] | None = None
    """Ceiling on every manifest's ``max_per_hour``; None = the manifest's."""
    max_bytes: Annotated[int, Meta(gt=0)] | None = None
    """Ceiling on every manifest's ``max_bytes`` (one sample); None = the manifest's."""
    mqtt_topic: Annotated[str, Meta(pattern=r"^[^+#\x00]+\Z", max_length=1024)] | None = None
    """MQTT topic samples are published to (``{adapter}`` is replaced by the adapter's MQTT
    name); default ``<topic_prefix>/<gateway_id>/samples/<adapter>``."""
    # UNSET, not True, by default: ``mqtt = true`` beside another sink is a conflict, the
    # default beside one is not, and only UNSET tells the two apart (msgspec keeps no record
    # of which fields were given). `sink` reads UNSET as true.
    mqtt: bool | UnsetType = UNSET
    """Ship kept samples over MQTT (needs ``mqtt.host``); False keeps them on disk for
    ``wasmgate samples export``. Default true, unless ``http_path`` or ``oci_repository``
    names the sink instead."""
    http_path: Annotated[str, Meta(pattern=r"^/[^?#\s]*\Z", max_length=1024)] | None = None
    """Set (e.g. ``/v1/samples``): POST each sample (JSON) to ``cloud.url`` + this path
    instead of MQTT, when the cloud is reachable; needs ``cloud.url``."""
    oci_repository: Annotated[str, Meta(max_length=512)] | None = None
    """Set (``HOST[:PORT]/REPO``, e.g. ``registry.lab:5000/wasmgate/samples``): push the
    samples instead of MQTT as OCI artifacts to this repository, through ``[registry]``'s
    insecure, credentials (when ``registry.host`` is this host), CA, timeout and backoff."""
    oci_batch: Annotated[int, Meta(ge=1, le=1000)] = 16
    """Samples per OCI artifact at most (consecutive ones of one adapter and bundle version;
    at most 4 MiB); 1 = one artifact per sample."""

    def __post_init__(self) -> None:
        repository = self.oci_repository
        if repository is not None and not re.fullmatch(_OCI_REPOSITORY, repository):
            raise BadField(
                "oci_repository",
                f"{repository[:200]!r} is not HOST[:PORT]/REPO "
                "(lower-case repository path, no tag)",
            )
        # A stream has one consumer (an acked sample is gone), so samples go to one sink.
        if self.http_path is not None and repository is not None:
            raise ValueError(
                "http_path and oci_repository are both set: samples go to one sink, keep one"
            )
        if self.mqtt is True and self.sink != "mqtt":
            other = "http_path" if self.http_path is not None else "oci_repository"
            raise ValueError(
                f"mqtt = true and {other} are both set: samples go to one sink "
                f"(set mqtt = false or remove {other})"
            )

    @property
    def sink(self) -> Literal["mqtt", "http", "oci"] | None:
        """Where kept samples go: the one configured sink (None: kept for export only)."""
        if self.http_path is not None:
            return "http"
        if self.oci_repository is not None:
            return "oci"
        return "mqtt" if self.mqtt is not False else None


class TrustSettings(Document):
    expiry: Literal["stop", "warn"] = "warn"
    """What an installed bundle does once its manifest's ``expires`` has passed (checked at
    start-up, on SIGHUP and the moment it expires while serving): ``stop`` unloads it,
    ``warn`` keeps it serving with a warning (an offline gateway stays useful). Either way
    ``/v1/status`` lists it under ``bundles.expired`` and ``wasmgate_bundle_expired`` is 1.
    Installing an expired bundle is always refused."""


_GROUP = r"^[A-Za-z0-9._-]{1,64}\Z"
"""A group name is one MQTT topic level without wildcards (``fleet/<group>/desired``)."""


class FleetSettings(Document):
    """Membership in a fleet: signed desired-state documents (MQTT, ``PUT /v1/desired``, a
    file) say which bundles this gateway runs; see docs/mqtt-topics.md."""

    groups: tuple[Annotated[str, Meta(pattern=_GROUP)], ...] = ()
    """Groups this gateway belongs to: it follows ``<topic_prefix>/fleet/<group>/desired``
    for each (its own ``<topic_prefix>/<gateway_id>/desired`` wins over all of them)."""
    desired_file: Path | None = None
    """A signed fleet document on disk, for air-gapped sites: applied at start, when it
    changes (polled every second) and on SIGHUP."""
    retry_initial_s: Annotated[float, Meta(gt=0, le=3600)] = 1.0
    """First wait before pulling again a bundle the registry did not deliver (unreachable);
    it doubles per failed try up to ``retry_max_s``."""
    retry_max_s: Annotated[float, Meta(gt=0, le=3600)] = 60.0
    """Longest wait between two tries of a pending bundle (the registry was unreachable)."""
    max_document_bytes: Annotated[int, Meta(gt=0)] = 256 * 1024
    """Largest fleet document accepted (MQTT payload, ``PUT /v1/desired`` body, file)."""


class WorkerSettings(Document):
    """How the daemon uses the gateway's CPUs (`wasmgate.runtime.ops.cpus`) and processes
    (`wasmgate.runtime.supervisor`)."""

    count: Literal["auto"] | Annotated[int, Meta(ge=1, le=64)] = 1
    """Data-plane worker processes serving HTTP. ``1``: one process does everything (the
    default). ``N`` > 1: a supervisor (the control plane: installs, trust, fleet, MQTT,
    gRPC, the status page and ``/metrics`` of the whole gateway) and N workers sharing the
    HTTP port, each its own interpreter on its own CPU. ``auto``: one worker per CPU of
    the process's affinity, fewer when the memory available would not hold them
    (``MemAvailable`` / 256 MiB per worker; 1 on a single CPU). Restart-only."""

    zygote: bool = True
    """With ``count`` > 1: fork each worker from a zygote process that imported the
    workers' code and warmed up ONNX Runtime before the supervisor started a thread, so the
    workers share those pages with it and each other (~50 MB less a worker). ``false``:
    each worker is a fresh interpreter (``exec``), as when no zygote can be had.
    Restart-only."""

    cpu_affinity: Literal["auto", "off"] = "auto"
    """``auto``: on a process allowed on several CPUs, its Python threads share the last of
    them (one interpreter runs Python on one CPU at a time, and threads spread over CPUs
    hand its lock across cores: measured 0.55-0.7x the requests of one CPU), while ONNX
    Runtime's and LiteRT's own threads use every CPU. ``off``: the threads go wherever the
    kernel puts them (as before; a guest that computes long in WebAssembly may gain from
    that on a second CPU)."""

    share_weights: bool = True
    """With ``count`` > 1: an ONNX model on the CPU EP whose weights reach 1 MiB holds them
    once for the gateway, in a sealed memory file every process maps read-only, instead of
    a copy in each worker and the supervisor. ``false``: a copy per process (as before).
    Restart-only."""


class LogSettings(Document):
    format: Literal["plain", "json"] = "plain"
    """Log line format on stderr."""
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Minimum level logged."""

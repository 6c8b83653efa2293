"""Daemon settings: typed models loaded from TOML, overridable by environment variables.

Precedence (highest first): environment ``WASMGATE_<SECTION>__<FIELD>`` (for example
``WASMGATE_HTTP__PORT=9000``), then the TOML file (``--config PATH``, default
``/etc/wasmgate/config.toml`` when it exists), then the built-in defaults below.
Unknown keys are errors, in the file and in the environment alike.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config_env import env_data, env_paths, merged
from wasmgate.signing.variables import Value as VariableValue

DEFAULT_CONFIG_PATH = Path("/etc/wasmgate/config.toml")


def default_data_dir() -> Path:
    """``/var/lib/wasmgate`` for root, else ``$XDG_DATA_HOME/wasmgate``."""
    if os.geteuid() == 0:
        return Path("/var/lib/wasmgate")
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "wasmgate"


class _Section(BaseModel):
    # The fields' docstrings are the documentation (a test checks every field has one), but
    # pydantic is not asked to read them: that reads this file's source for every class,
    # ~30 ms of each daemon start, and nothing at run time uses the descriptions.
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpSettings(_Section):
    host: str = "127.0.0.1"
    """Address the HTTP server binds to. Loopback by default; set 0.0.0.0 to expose it."""
    port: int = Field(default=8080, ge=0, le=65535)
    """TCP port of the HTTP server (0 picks a free port, logged at start)."""
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Largest request body accepted; larger bodies get 413."""
    max_json_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """Largest JSON part of a V2 request (all of a JSON body, or the header before binary
    tensors); larger ones get 413. Parsing JSON costs far more than copying binary tensors:
    send big tensors with the binary extension."""
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    """Time a client has to send a request's headers (also how long an idle keep-alive
    connection stays open)."""
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """Time a client has to send a request's body once its headers arrived; else 408."""
    max_connections: int = Field(default=1024, gt=0)
    """Open connections at most (keep it under the unit's LimitNOFILE=4096). At the cap the
    oldest idle connection of the peer holding the most is closed; else new ones get 503."""
    max_connections_per_peer: int = Field(default=128, gt=0)
    """Open connections per client IP address; beyond it that peer's oldest idle one goes."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``Host`` header) answered besides loopback names and IP literals, e.g.
    ``["gateway.local"]``; ``["*"]`` answers any. Guards against DNS rebinding."""
    management_token: str | None = None
    """Bearer token for /v1/bundles. None disables the management API entirely."""
    tls_cert: Path | None = None
    """PEM certificate for HTTPS. Both tls_cert and tls_key enable TLS."""
    tls_key: Path | None = None
    """PEM private key matching tls_cert."""


class GrpcSettings(_Section):
    """The KServe V2 gRPC listener (``inference.GRPCInferenceService``, what
    ``tritonclient.grpc`` and ``perf_analyzer -i grpc`` speak). It binds ``http.host`` and
    uses ``http.tls_cert``/``http.tls_key`` when they are set, like the HTTP listener."""

    port: int | None = Field(default=None, ge=0, le=65535)
    """TCP port of the gRPC listener; None (the default) turns gRPC off (0 picks a free
    port, logged at start)."""
    max_message_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Largest request message accepted (and answer sent); larger ones are refused with
    RESOURCE_EXHAUSTED before they are decoded."""
    max_concurrent_rpcs: int = Field(default=1024, gt=0)
    """RPCs in progress at once on the listener; beyond it new ones get RESOURCE_EXHAUSTED.
    Admission control per adapter and model (``limits``) applies inside this bound."""


class MqttSettings(_Section):
    host: str | None = None
    """Broker host. None (the default) turns the MQTT bridge off."""
    port: int = Field(default=1883, ge=1, le=65535)
    """Broker port."""
    protocol: Literal["5", "3.1.1"] = "5"
    """MQTT protocol version used by the daemon's own connection."""
    client_id: str | None = None
    """Client id; default ``wasmgate-<gateway_id>``. Must be stable for persistent sessions."""
    username: str | None = None
    """Username for broker authentication."""
    password: str | None = None
    """Password for broker authentication."""
    tls_ca: Path | None = None
    """CA bundle; setting it turns TLS on."""
    tls_cert: Path | None = None
    """Client certificate for mutual TLS."""
    tls_key: Path | None = None
    """Client key for mutual TLS."""
    keepalive_s: int = Field(default=30, ge=5)
    """MQTT keepalive interval in seconds."""
    topic_prefix: str = "wasmgate/v1"
    """Root of every topic; the full root is ``<topic_prefix>/<gateway_id>/``."""
    gateway_id: str | None = None
    """Gateway id in topics; default the host name."""
    qos: int = Field(default=1, ge=0, le=2)
    """QoS for subscriptions and answers."""
    events_qos: int = Field(default=1, ge=1, le=2)
    """QoS of what adapters emit to ``events/<adapter>`` (from requests of every transport).
    Events travel through the on-disk store and leave it only on the broker's
    acknowledgement, so QoS 0 is not offered."""
    shared_group: str | None = None
    """Subscribe through ``$share/<group>/`` so several daemons share one request stream."""
    session_expiry_s: int = Field(default=3600, ge=0)
    """MQTT 5 Session Expiry Interval: how long the broker keeps our session while offline."""
    max_payload_bytes: int = Field(default=1024 * 1024, gt=0)
    """Largest request payload handled; larger ones get a 413-style error answer."""
    dedupe_window_s: float = Field(default=300.0, ge=0)
    """Window in which a redelivered request (same correlation data or id) is answered once."""
    dedupe_max_entries: int = Field(default=10_000, gt=0)
    """Requests remembered for the dedupe window at most (32 bytes each); oldest go first."""
    response_topics: tuple[str, ...] = ("#",)
    """Topic filters (``+``/``#`` wildcards) a request's Response Topic must match, e.g.
    ``["devices/+/replies/#"]``. The daemon's own tree (``topic_prefix``), ``$`` topics and
    topics with wildcards are refused whatever this says. Narrow it, and give devices
    broker ACLs on what they may publish and subscribe."""
    reconnect_max_s: float = Field(default=30.0, gt=0)
    """Cap of the exponential reconnect backoff."""
    busy_retry_s: float = Field(default=5.0, ge=0)
    """How long a request refused as busy is retried before a 429 answer (0 = answer at once).
    The broker holds requests beyond ``receive_maximum``, so a backlog waits there."""
    receive_maximum: int = Field(default=64, ge=1, le=65535)
    """MQTT 5 Receive Maximum: unacknowledged requests the broker may hand us at once.
    Requests are acked only once answered, so this bounds the bridge's in-flight work."""

    def resolved_gateway_id(self) -> str:
        """``gateway_id``, or the host name when unset (the topics and fleet reports)."""
        return self.gateway_id or socket.gethostname()


class PathSettings(_Section):
    data_dir: Path = Field(default_factory=default_data_dir)
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


class LimitSettings(_Section):
    """Daemon-wide ceilings. A manifest may ask for less, never for more."""

    max_bundle_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    """Largest bundle file accepted (checked before anything is read)."""
    max_module_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    """Largest adapter .wasm accepted."""
    compile_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """Time one adapter's compile to native code may take. Adapters compile in a child
    process that is killed when this is spent, and the bundle is refused; other installs go
    on meanwhile. A few KiB of pathological wasm can compile for minutes."""
    compile_memory_mb: int = Field(default=1024, gt=0)
    """Memory the compile child process may allocate, in MiB (beyond it the bundle is
    refused)."""
    memory_mb: int = Field(default=256, gt=0)
    """Ceiling on one guest instance's linear memory, in MiB."""
    deadline_ms: int = Field(default=10_000, gt=0)
    """Ceiling on one request's wall-clock deadline, in milliseconds."""
    fuel: int | None = Field(default=None, gt=0)
    """Ceiling on fuel per request when a manifest asks for fuel; None = manifest's value."""
    max_output_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """Ceiling on an adapter's answer size."""
    max_log_bytes: int = Field(default=64 * 1024, ge=0)
    """Captured guest stdout/stderr per request, beyond which it is cut."""
    max_in_flight: int = Field(default=64, gt=0)
    """Ceiling on concurrently running requests per adapter."""
    queue_size: int = Field(default=256, ge=0)
    """Ceiling on requests waiting per adapter before 'busy'."""
    workers: int = Field(default=0, ge=0)
    """Worker threads for guests and models; 0 = 2 x CPU count. Read at start (a reload
    keeps the running count)."""
    spare_instances: int = Field(default=2, ge=0, le=64)
    """Fresh-mode adapters: instances started (instantiated, ``_initialize`` run) off the
    request path after a request, each handed to exactly one later request; 0 = every
    request instantiates on its own path. Isolation is the same either way."""
    max_weight: int = Field(default=16, ge=1, le=1000)
    """Ceiling on a manifest's ``limits.weight``. Each adapter and each directly served model
    is a tenant of the worker pool; a free worker takes the next job of the tenant that has
    had the least worker time per unit of weight, and a tenant holds at most its share of the
    workers (its weight over the total weight of the tenants seen in the last second), so a
    busy tenant cannot push the others below their share."""
    max_tenant_workers: int = Field(default=0, ge=0)
    """Most workers one tenant may hold at once; 0 = all but one (at least one), which keeps
    a worker free for the other tenants however slow the busy tenant's requests are."""
    batch_workers: int = Field(default=0, ge=0)
    """Threads that run the batches of every batched model together (one pool per daemon,
    not a thread per model); 0 = CPU count. Read at start, like ``workers``."""
    max_batch_size: int = Field(default=64, gt=0)
    """Ceiling on a model's dynamic batch size."""


class CloudSettings(_Section):
    url: str | None = None
    """Base URL of a KServe V2 endpoint for fallback (e.g. https://cloud/); None = off."""
    token: str | None = None
    """Bearer token sent to the cloud endpoint."""
    tls_ca: Path | None = None
    """CA bundle to verify the cloud endpoint."""
    timeout_s: float = Field(default=5.0, gt=0)
    """Timeout for one cloud request."""
    max_concurrent: int = Field(default=16, gt=0)
    """Cloud requests in flight at once."""
    max_answer_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Largest cloud answer accepted, in bytes. A larger one (by Content-Length, or counted
    while a chunked answer streams in) is refused before more is read, so an endpoint cannot
    exhaust the gateway's memory. Redirects are never followed (a 3xx is a failure)."""
    breaker_failures: int = Field(default=5, gt=0)
    """Consecutive failures that open the circuit breaker."""
    breaker_reset_s: float = Field(default=30.0, gt=0)
    """Time the breaker stays open before half-open probes."""
    breaker_failure_rate: float = Field(default=0.5, gt=0, le=1)
    """Failure share over the last ``breaker_window`` calls that also opens the breaker."""
    breaker_window: int = Field(default=20, gt=0)
    """Calls the failure rate is measured over (the rate counts only once the window is full)."""
    breaker_probes: int = Field(default=1, gt=0)
    """Trial calls let through while half-open; one success closes the breaker."""
    defer: bool = True
    """Honour bundles whose ``fallback.defer`` asks to keep a request the cloud could not
    take (cloud down, breaker open) and send it when the cloud is back; the client gets a
    202 at once and the answer is published on MQTT ``deferred/<adapter>``. Needs
    ``mqtt.host``. False: such requests fail as without deferral."""
    protocol: Literal["v2", "raw"] = "v2"
    """Adapter fallback call: ``v2`` POSTs ``/v2/models/<adapter>/infer`` (BYTES input
    ``payload``, output ``answer``; any KServe V2 server, or another wasmgate); ``raw`` POSTs
    the payload as-is to ``/v1/adapters/<adapter>`` (wasmgate's raw adapter endpoint)."""


class StreamSettings(_Section):
    """Limits of one store stream (``[store.streams.<name>]``)."""

    max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    """Bytes (payloads plus metadata) the stream keeps at most; beyond, the oldest entries
    are dropped and counted (``wasmgate_store_dropped_total{reason="full"}``)."""
    max_age_s: float = Field(default=7 * 86400, ge=0)
    """Entries older than this are dropped and counted (``reason="expired"``); 0 = kept
    until delivered or pushed out by ``max_bytes``."""


class StoreSettings(_Section):
    """The on-disk store-and-forward queue (SQLite in WAL mode, one file)."""

    path: Path | None = None
    """The store's SQLite file; default ``<state_dir>/store.db``."""
    sync: Literal["normal", "full"] = "normal"
    """``normal``: every stored entry survives a crash or SIGKILL of the daemon; an OS crash
    or power cut may lose the last fraction of a second. ``full``: an fsync per commit, also
    power-safe, slower on slow flash (measured in ``bench/bench_store.py``)."""
    defaults: StreamSettings = StreamSettings()
    """Limits of every stream not named in ``streams``."""
    streams: dict[str, StreamSettings] = Field(default_factory=dict)
    """Per-stream limits by name: ``answers`` (MQTT answers while the broker is away),
    ``events`` (every adapter event on its way to MQTT), ``cloud`` (deferred cloud
    fallbacks), ``samples`` (hard examples kept for retraining). An unknown name is refused
    at start."""
    drain_rate: float = Field(default=200.0, gt=0)
    """Stored entries published per second at most while draining a backlog, so a drain
    never starves live answers of the link."""
    drain_window: int = Field(default=32, ge=1, le=65535)
    """Stored entries sent and not yet acknowledged by the broker at most (in-flight
    window of the drain)."""

    def limits_of(self, stream: str) -> StreamSettings:
        return self.streams.get(stream, self.defaults)


_OCI_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI_REPOSITORY = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])"
    rf"(?::[0-9]{{1,5}})?/{_OCI_COMPONENT}(?:/{_OCI_COMPONENT})*"
)
"""distribution's grammar of ``HOST[:PORT]/REPO`` (as ``fleet.ocitypes`` parses references)."""


class SamplesSettings(_Section):
    """Hard examples kept for retraining (``[samples]``): these only tighten what each
    bundle's manifest ``[samples]`` allows; they can never let a bundle keep more."""

    enabled: bool = True
    """False: no sample is kept, whatever the manifests allow."""
    rate: float = Field(default=1.0, ge=0, le=1)
    """Ceiling on every manifest's ``rate`` (the lower of the two applies)."""
    max_per_hour: int | None = Field(default=None, ge=0)
    """Ceiling on every manifest's ``max_per_hour``; None = the manifest's."""
    max_bytes: int | None = Field(default=None, gt=0)
    """Ceiling on every manifest's ``max_bytes`` (one sample); None = the manifest's."""
    mqtt_topic: str | None = Field(default=None, pattern=r"^[^+#\x00]+$", max_length=1024)
    """MQTT topic samples are published to (``{adapter}`` is replaced by the adapter's MQTT
    name); default ``<topic_prefix>/<gateway_id>/samples/<adapter>``."""
    mqtt: bool = True
    """Ship kept samples over MQTT (needs ``mqtt.host``); False keeps them on disk for
    ``wasmgate samples export``."""
    http_path: str | None = Field(default=None, pattern=r"^/[^?#\s]*$", max_length=1024)
    """Set (e.g. ``/v1/samples``): POST each sample (JSON) to ``cloud.url`` + this path
    instead of MQTT, when the cloud is reachable; needs ``cloud.url``."""
    oci_repository: str | None = Field(default=None, max_length=512)
    """Set (``HOST[:PORT]/REPO``, e.g. ``registry.lab:5000/wasmgate/samples``): push the
    samples instead of MQTT as OCI artifacts to this repository, through ``[registry]``'s
    insecure, credentials (when ``registry.host`` is this host), CA, timeout and backoff."""
    oci_batch: int = Field(default=16, ge=1, le=1000)
    """Samples per OCI artifact at most (consecutive ones of one adapter and bundle version;
    at most 4 MiB); 1 = one artifact per sample."""

    @field_validator("oci_repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(_OCI_REPOSITORY, value):
            raise ValueError(
                f"{value[:200]!r} is not HOST[:PORT]/REPO (lower-case repository path, no tag)"
            )
        return value

    @model_validator(mode="after")
    def _one_sink(self) -> Self:
        # A stream has one consumer (an acked sample is gone), so samples go to one sink.
        if self.http_path is not None and self.oci_repository is not None:
            raise ValueError(
                "http_path and oci_repository are both set: samples go to one sink, keep one"
            )
        other = "http_path" if self.http_path is not None else "oci_repository"
        if self.sink != "mqtt" and self.mqtt and "mqtt" in self.model_fields_set:
            raise ValueError(
                f"mqtt = true and {other} are both set: samples go to one sink "
                f"(set mqtt = false or remove {other})"
            )
        return self

    @property
    def sink(self) -> Literal["mqtt", "http", "oci"] | None:
        """Where kept samples go: the one configured sink (None: kept for export only)."""
        if self.http_path is not None:
            return "http"
        if self.oci_repository is not None:
            return "oci"
        return "mqtt" if self.mqtt else None


class RegistrySettings(_Section):
    """OCI registry that bundles are pulled from by digest (fleet) and that ``wasmgate bundle
    push|pull`` use. The registry is only transport: a pulled bundle is installed through the
    same signature and anti-rollback checks as any other."""

    host: str | None = None
    """``HOST[:PORT]`` of the registry that ``username``/``password`` belong to (other
    hosts never see them) and that ``wasmgate doctor`` checks; None = every registry."""
    insecure: bool = False
    """Plain HTTP instead of HTTPS. Only for a registry on loopback or in a lab."""
    username: str | None = None
    """User name for the registry (HTTP basic, or to obtain a bearer token)."""
    password: str | None = None
    """Password or access token for ``username``."""
    ca: Path | None = None
    """CA bundle (PEM) that verifies the registry's certificate; None = system CAs."""
    max_bundle_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    """Largest bundle layer pulled: checked against the manifest's declared size before a
    byte is downloaded, and while streaming (a registry cannot send more than declared)."""
    retries: int = Field(default=5, ge=0, le=100)
    """Further tries of a pull after the registry is unreachable (connection, timeout, 5xx,
    429), with exponential backoff; then the pull fails as unavailable (and is retried by
    the next reconcile). A refused artifact (digest, size, type) is never retried."""
    backoff_s: float = Field(default=1.0, gt=0, le=3600)
    """Wait before the first retry; doubled at each further one (with jitter)."""
    backoff_max_s: float = Field(default=60.0, gt=0, le=3600)
    """Ceiling on one wait between retries."""
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """Connect/read timeout of one HTTP request to the registry."""


class TrustSettings(_Section):
    expiry: Literal["stop", "warn"] = "warn"
    """What an installed bundle does once its manifest's ``expires`` has passed (checked at
    start-up, on SIGHUP and the moment it expires while serving): ``stop`` unloads it,
    ``warn`` keeps it serving with a warning (an offline gateway stays useful). Either way
    ``/v1/status`` lists it under ``bundles.expired`` and ``wasmgate_bundle_expired`` is 1.
    Installing an expired bundle is always refused."""


_GROUP = r"^[A-Za-z0-9._-]{1,64}$"
"""A group name is one MQTT topic level without wildcards (``fleet/<group>/desired``)."""


class FleetSettings(_Section):
    """Membership in a fleet: signed desired-state documents (MQTT, ``PUT /v1/desired``, a
    file) say which bundles this gateway runs; see docs/mqtt-topics.md."""

    groups: tuple[Annotated[str, Field(pattern=_GROUP)], ...] = ()
    """Groups this gateway belongs to: it follows ``<topic_prefix>/fleet/<group>/desired``
    for each (its own ``<topic_prefix>/<gateway_id>/desired`` wins over all of them)."""
    desired_file: Path | None = None
    """A signed fleet document on disk, for air-gapped sites: applied at start, when it
    changes (polled every second) and on SIGHUP."""
    retry_initial_s: float = Field(default=1.0, gt=0, le=3600)
    """First wait before pulling again a bundle the registry did not deliver (unreachable);
    it doubles per failed try up to ``retry_max_s``."""
    retry_max_s: float = Field(default=60.0, gt=0, le=3600)
    """Longest wait between two tries of a pending bundle (the registry was unreachable)."""
    max_document_bytes: int = Field(default=256 * 1024, gt=0)
    """Largest fleet document accepted (MQTT payload, ``PUT /v1/desired`` body, file)."""


class LogSettings(_Section):
    format: Literal["plain", "json"] = "plain"
    """Log line format on stderr."""
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Minimum level logged."""


class TelemetrySettings(_Section):
    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """Base URL of an OTLP/HTTP receiver (an OpenTelemetry Collector, Jaeger, Tempo...),
    e.g. ``http://127.0.0.1:4318``: spans are POSTed to ``<otlp_endpoint>/v1/traces``.
    None (the default) turns tracing off: the OpenTelemetry SDK is not even loaded, and a
    request's incoming ``traceparent`` is only passed on (cloud fallback, answer)."""
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    """Share of new traces recorded (chosen by trace id). A request that brings a
    ``traceparent`` follows its sampled flag instead."""
    max_queue_spans: int = Field(default=2048, gt=0)
    """Finished spans waiting for export at most; beyond it new spans are dropped, so a
    slow or unreachable receiver costs spans, never request latency or memory."""
    export_delay_ms: int = Field(default=1000, gt=0, le=60_000)
    """Time between two exports of the queued spans (sooner when 512 are queued)."""
    export_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Time one export POST may take; also the most the final flush delays shutdown."""


class Settings(BaseModel):
    """Root settings of ``wasmgate serve``; the environment's ``WASMGATE_*`` variables win
    over the values given (the TOML file's), see `config_env`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    http: HttpSettings = HttpSettings()
    """HTTP server (KServe V2, raw adapter endpoint, management API, metrics, status)."""
    grpc: GrpcSettings = GrpcSettings()
    """KServe V2 over gRPC; off unless ``grpc.port`` is set."""
    mqtt: MqttSettings = MqttSettings()
    """MQTT bridge; off unless ``mqtt.host`` is set."""
    paths: PathSettings = Field(default_factory=PathSettings)
    """Where bundles, state and caches live."""
    limits: LimitSettings = LimitSettings()
    """Daemon-wide ceilings on every manifest's limits."""
    cloud: CloudSettings = CloudSettings()
    """Cloud fallback endpoint."""
    store: StoreSettings = StoreSettings()
    """Store-and-forward on disk: what waits for the broker or the cloud to come back."""
    samples: SamplesSettings = SamplesSettings()
    """Hard examples kept for retraining (tightens each manifest's ``[samples]``)."""
    registry: RegistrySettings = RegistrySettings()
    """OCI registry for bundle pulls and ``wasmgate bundle push|pull``."""
    trust: TrustSettings = TrustSettings()
    """Bundle trust policy (the trust file itself is ``paths.trust_file``)."""
    log: LogSettings = LogSettings()
    """Logging."""
    fleet: FleetSettings = FleetSettings()
    """Fleet membership (groups, the air-gapped desired-state file, retries)."""
    telemetry: TelemetrySettings = TelemetrySettings()
    """Traces (OpenTelemetry, OTLP/HTTP export); off unless ``telemetry.otlp_endpoint`` is set."""
    profile: str | None = None
    """Device profile name or path to a profile TOML; None = detect the hardware."""
    drain_s: float = Field(default=10.0, ge=0)
    """On SIGTERM, time given to in-flight requests before the daemon exits."""
    variables: dict[str, dict[str, VariableValue]] = Field(default_factory=dict)
    """Operator variables per bundle (``[variables.<bundle>] name = value``): values of the
    params its manifest declares overridable, checked against the declared type and range
    when the bundle loads; a refused value is logged and the default kept. A value set over
    the management API or MQTT (persisted in the state dir) wins over this one."""

    @model_validator(mode="before")
    @classmethod
    def _environment_wins(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return merged(data, env_data(cls))


def _check_env_sections(env: dict[tuple[str, ...], str]) -> None:
    """A misspelled section (``WASMGATE_HTPP__PORT``) is an error, not silently ignored."""
    sections = {
        n
        for n, f in Settings.model_fields.items()
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
    }
    for path, name in sorted(env.items()):
        if len(path) > 1 and path[0] not in sections:
            known = ", ".join(sorted(sections))
            raise ConfigError(f"environment variable {name}: unknown section {path[0]!r} ({known})")


def _format_error(source: str, err: ValidationError, env: dict[tuple[str, ...], str]) -> str:
    first = err.errors()[0]
    loc = tuple(str(p).lower() for p in first["loc"])
    key = ".".join(loc) or "(root)"
    kind = first["type"]
    problem = "unknown key" if kind == "extra_forbidden" else first["msg"]
    # The environment wins over the file, so a key an environment variable sets is its fault.
    blamed = next((env[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in env), None)
    if blamed is not None:
        source = f"environment variable {blamed}"
    return f"{source}: {key}: {problem}"


def load_settings(path: Path | None, *, required: bool = False) -> Settings:
    """Load settings from ``path`` (or the default file if it exists) plus the environment.

    Raises ConfigError with a one-line message naming the file, the key and the problem.
    """
    file_path = path if path is not None else DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    if path is not None or file_path.exists():
        try:
            with file_path.open("rb") as fh:
                data = tomllib.load(fh)
        except OSError as e:
            raise ConfigError(f"{file_path}: cannot read: {e.strerror or e}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file_path}: not valid TOML: {e}") from e
    elif required:
        raise ConfigError(f"{file_path}: cannot read: no such file")
    source = str(file_path) if data else "configuration"
    env = env_paths()
    _check_env_sections(env)
    try:
        return Settings(**data)
    except ValidationError as e:
        raise ConfigError(_format_error(source, e, env)) from e

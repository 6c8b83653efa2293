"""The daemon's config sections for what it talks to: its listeners (``[http]``,
``[grpc]``) and the brokers, endpoints and registries it reaches (``[mqtt]``, ``[cloud]``,
``[registry]``, ``[telemetry]``). `wasmgate.runtime.ops.config` puts them together.

Each field's docstring is its documentation (a test checks every field has one); msgspec
does not read them, so they cost the daemon's start nothing. Bounds are `msgspec.Meta`
constraints, checked when a config is loaded (`wasmgate.typed.convert`), not when a
section is built directly in Python. Patterns end in ``\\Z``, not ``$``: msgspec matches
with Python's `re`, whose ``$`` also matches before a final newline.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Meta

from wasmgate.typed import Document


class HttpSettings(Document):
    host: str = "127.0.0.1"
    """Address the HTTP server binds to. Loopback by default; set 0.0.0.0 to expose it."""
    port: Annotated[int, Meta(ge=0, le=65535)] = 8080
    """TCP port of the HTTP server (0 picks a free port, logged at start)."""
    max_body_bytes: Annotated[int, Meta(gt=0)] = 16 * 1024 * 1024
    """Largest request body accepted; larger bodies get 413."""
    max_json_bytes: Annotated[int, Meta(gt=0)] = 4 * 1024 * 1024
    """Largest JSON part of a V2 request (all of a JSON body, or the header before binary
    tensors); larger ones get 413. Parsing JSON costs far more than copying binary tensors:
    send big tensors with the binary extension."""
    header_timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 10.0
    """Time a client has to send a request's headers (also how long an idle keep-alive
    connection stays open)."""
    body_timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    """Time a client has to send a request's body once its headers arrived; else 408."""
    max_connections: Annotated[int, Meta(gt=0)] = 1024
    """Open connections at most (keep it under the unit's LimitNOFILE=4096). At the cap the
    oldest idle connection of the peer holding the most is closed; else new ones get 503."""
    max_connections_per_peer: Annotated[int, Meta(gt=0)] = 128
    """Open connections per client IP address; beyond it that peer's oldest idle one goes."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``Host`` header) answered besides loopback names and IP literals, e.g.
    ``["gateway.local"]``; ``["*"]`` answers any. Guards against DNS rebinding."""
    management_token: str | None = None
    """Bearer token for /v1/bundles, /v1/desired and the model repository extension
    (HTTP /v2/repository/*, gRPC Repository*). None disables them entirely."""
    tls_cert: Path | None = None
    """PEM certificate for HTTPS. Both tls_cert and tls_key enable TLS."""
    tls_key: Path | None = None
    """PEM private key matching tls_cert."""


class GrpcSettings(Document):
    """The KServe V2 gRPC listener (``inference.GRPCInferenceService``, what
    ``tritonclient.grpc`` and ``perf_analyzer -i grpc`` speak). It binds ``http.host`` and
    uses ``http.tls_cert``/``http.tls_key`` when they are set, like the HTTP listener."""

    port: Annotated[int, Meta(ge=0, le=65535)] | None = None
    """TCP port of the gRPC listener; None (the default) turns gRPC off (0 picks a free
    port, logged at start)."""
    max_message_bytes: Annotated[int, Meta(gt=0)] = 16 * 1024 * 1024
    """Largest request message accepted (and answer sent); larger ones are refused with
    RESOURCE_EXHAUSTED before they are decoded."""
    max_concurrent_rpcs: Annotated[int, Meta(gt=0)] = 1024
    """RPCs in progress at once on the listener; beyond it new ones get RESOURCE_EXHAUSTED.
    Admission control per adapter and model (``limits``) applies inside this bound."""


class MqttSettings(Document):
    host: str | None = None
    """Broker host. None (the default) turns the MQTT bridge off."""
    port: Annotated[int, Meta(ge=1, le=65535)] = 1883
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
    keepalive_s: Annotated[int, Meta(ge=5)] = 30
    """MQTT keepalive interval in seconds."""
    topic_prefix: str = "wasmgate/v1"
    """Root of every topic; the full root is ``<topic_prefix>/<gateway_id>/``."""
    gateway_id: str | None = None
    """Gateway id in topics; default the host name."""
    qos: Annotated[int, Meta(ge=0, le=2)] = 1
    """QoS for subscriptions and answers."""
    events_qos: Annotated[int, Meta(ge=1, le=2)] = 1
    """QoS of what adapters emit to ``events/<adapter>`` (from requests of every transport).
    Events travel through the on-disk store and leave it only on the broker's
    acknowledgement, so QoS 0 is not offered."""
    shared_group: str | None = None
    """Subscribe through ``$share/<group>/`` so several daemons share one request stream."""
    session_expiry_s: Annotated[int, Meta(ge=0)] = 3600
    """MQTT 5 Session Expiry Interval: how long the broker keeps our session while offline."""
    max_payload_bytes: Annotated[int, Meta(gt=0)] = 1024 * 1024
    """Largest request payload handled; larger ones get a 413-style error answer."""
    max_response_topic_bytes: Annotated[int, Meta(ge=1, le=65535)] = 1024
    """Longest MQTT 5 Response Topic (UTF-8 bytes) a request may name; a longer one is
    ignored unanswered (counted as ``oversize_refused``). Each request's reply address is
    kept while it is worked and in answers stored for an absent broker: a cap in bytes, not
    only in count, keeps a flood of huge properties from holding memory."""
    max_correlation_bytes: Annotated[int, Meta(ge=1, le=65535)] = 256
    """Longest MQTT 5 Correlation Data a request may carry (a UUID is 16 or 36 bytes); a
    longer one is ignored unanswered (counted as ``oversize_refused``)."""
    dedupe_window_s: Annotated[float, Meta(ge=0)] = 300.0
    """Window in which a redelivered request (same correlation data or id) is answered once."""
    dedupe_max_entries: Annotated[int, Meta(gt=0)] = 10_000
    """Requests remembered for the dedupe window at most (32 bytes each); oldest go first."""
    response_topics: tuple[str, ...] = ("#",)
    """Topic filters (``+``/``#`` wildcards) a request's Response Topic must match, e.g.
    ``["devices/+/replies/#"]``. The daemon's own tree (``topic_prefix``), ``$`` topics and
    topics with wildcards are refused whatever this says. Narrow it, and give devices
    broker ACLs on what they may publish and subscribe."""
    reconnect_max_s: Annotated[float, Meta(gt=0)] = 30.0
    """Cap of the exponential reconnect backoff."""
    reconnect_spread_s: Annotated[float, Meta(ge=0, le=3600)] = 5.0
    """After a lost connection, the first reconnect waits a random time in [0, this], so
    that a fleet whose broker restarted does not come back in the same second; a try that
    finds the broker still down waits a new one (or the backoff, when longer). A fleet of
    N gateways on one broker sets about N / 100 (10,000 gateways: 100 s) to stay under
    ~200 connects a second; 0 reconnects at once, then on the backoff."""
    busy_retry_s: Annotated[float, Meta(ge=0)] = 5.0
    """How long a request refused as busy is retried before a 429 answer (0 = answer at once).
    The broker holds requests beyond ``receive_maximum``, so a backlog waits there."""
    receive_maximum: Annotated[int, Meta(ge=1, le=65535)] = 64
    """MQTT 5 Receive Maximum: unacknowledged requests the broker may hand us at once.
    Requests are acked only once answered, so this bounds the bridge's in-flight work."""

    def resolved_gateway_id(self) -> str:
        """``gateway_id``, or the host name when unset (the topics and fleet reports)."""
        return self.gateway_id or socket.gethostname()


class CloudSettings(Document):
    url: str | None = None
    """Base URL of a KServe V2 endpoint for fallback (e.g. https://cloud/); None = off."""
    token: str | None = None
    """Bearer token sent to the cloud endpoint."""
    tls_ca: Path | None = None
    """CA bundle to verify the cloud endpoint."""
    timeout_s: Annotated[float, Meta(gt=0)] = 5.0
    """Timeout for one cloud request."""
    max_concurrent: Annotated[int, Meta(gt=0)] = 16
    """Cloud requests in flight at once."""
    max_answer_bytes: Annotated[int, Meta(gt=0)] = 16 * 1024 * 1024
    """Largest cloud answer accepted, in bytes. A larger one (by Content-Length, or counted
    while a chunked answer streams in) is refused before more is read, so an endpoint cannot
    exhaust the gateway's memory. Redirects are never followed (a 3xx is a failure)."""
    breaker_failures: Annotated[int, Meta(gt=0)] = 5
    """Consecutive failures that open the circuit breaker."""
    breaker_reset_s: Annotated[float, Meta(gt=0)] = 30.0
    """Time the breaker stays open before half-open probes."""
    breaker_failure_rate: Annotated[float, Meta(gt=0, le=1)] = 0.5
    """Failure share over the last ``breaker_window`` calls that also opens the breaker."""
    breaker_window: Annotated[int, Meta(gt=0)] = 20
    """Calls the failure rate is measured over (the rate counts only once the window is full)."""
    breaker_probes: Annotated[int, Meta(gt=0)] = 1
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


class RegistrySettings(Document):
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
    max_bundle_bytes: Annotated[int, Meta(gt=0)] = 512 * 1024 * 1024
    """Largest bundle layer pulled: checked against the manifest's declared size before a
    byte is downloaded, and while streaming (a registry cannot send more than declared)."""
    retries: Annotated[int, Meta(ge=0, le=100)] = 5
    """Further tries of a pull after the registry is unreachable (connection, timeout, 5xx,
    429), with exponential backoff; then the pull fails as unavailable (and is retried by
    the next reconcile). A refused artifact (digest, size, type) is never retried."""
    backoff_s: Annotated[float, Meta(gt=0, le=3600)] = 1.0
    """Wait before the first retry; doubled at each further one (with jitter)."""
    backoff_max_s: Annotated[float, Meta(gt=0, le=3600)] = 60.0
    """Ceiling on one wait between retries."""
    timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    """Connect/read timeout of one HTTP request to the registry."""


class TelemetrySettings(Document):
    otlp_endpoint: Annotated[str, Meta(pattern=r"^https?://[^\s]+\Z")] | None = None
    """Base URL of an OTLP/HTTP receiver (an OpenTelemetry Collector, Jaeger, Tempo...),
    e.g. ``http://127.0.0.1:4318``: spans are POSTed to ``<otlp_endpoint>/v1/traces``.
    None (the default) turns tracing off: the OpenTelemetry SDK is not even loaded, and a
    request's incoming ``traceparent`` is only passed on (cloud fallback, answer)."""
    sample_ratio: Annotated[float, Meta(ge=0, le=1)] = 1.0
    """Share of new traces recorded (chosen by trace id). A request that brings a
    ``traceparent`` follows its sampled flag instead."""
    max_queue_spans: Annotated[int, Meta(gt=0)] = 2048
    """Finished spans waiting for export at most; beyond it new spans are dropped, so a
    slow or unreachable receiver costs spans, never request latency or memory."""
    export_delay_ms: Annotated[int, Meta(gt=0, le=60_000)] = 1000
    """Time between two exports of the queued spans (sooner when 512 are queued)."""
    export_timeout_s: Annotated[float, Meta(gt=0, le=60)] = 5.0
    """Time one export POST may take; also the most the final flush delays shutdown."""

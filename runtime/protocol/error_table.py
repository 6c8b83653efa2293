"""The one error → status table every transport answers with (HTTP, management API, MQTT, gRPC).

Each `wasmgate.runtime.errors` class is mapped here on purpose (a test fails when a new
subclass is not). An answer is ``(status, code, internal)``: the HTTP status (MQTT sends the
same number as its ``status`` property and the body's ``code``), a short stable name for
logs and docs, and whether the message is internal; the gRPC column is the name of a
``grpc.StatusCode`` (a name, so this module never imports grpc). Internal messages (and
anything that is not a `DaemonError`, which is a bug) are logged by the transport and
answered with `INTERNAL_MESSAGE` only, so a client never sees paths, library text or
tracebacks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType

import msgspec

from wasmgate.runtime.errors import (
    BackendError,
    BadRequest,
    BundleRejected,
    Busy,
    CloudUnavailable,
    ConfigError,
    DaemonError,
    DeadlineExceeded,
    DocumentRefused,
    FallbackFailed,
    Forbidden,
    InferenceFailed,
    InsufficientStorage,
    NotFound,
    NotReady,
    PayloadTooLarge,
    Unauthorized,
)

log = logging.getLogger("wasmgate.requests")

INTERNAL_MESSAGE = "internal server error"


class ErrorStatus(msgspec.Struct, frozen=True):
    """How one kind of error is answered."""

    status: int
    code: str
    grpc: str
    """The ``grpc.StatusCode`` member name the gRPC listener answers with."""
    internal: bool = False
    """True: log the message, answer `INTERNAL_MESSAGE`."""


INTERNAL = ErrorStatus(500, "internal", "INTERNAL", internal=True)
"""Anything that is not a `DaemonError`: a bug, never explained to the client."""

TABLE: Mapping[type[DaemonError], ErrorStatus] = MappingProxyType(
    {
        # Client mistakes: the request itself is wrong; never sent to the cloud instead.
        BadRequest: ErrorStatus(400, "bad_request", "INVALID_ARGUMENT"),
        Unauthorized: ErrorStatus(401, "unauthorized", "UNAUTHENTICATED"),
        Forbidden: ErrorStatus(403, "forbidden", "PERMISSION_DENIED"),
        NotFound: ErrorStatus(404, "not_found", "NOT_FOUND"),
        PayloadTooLarge: ErrorStatus(413, "payload_too_large", "RESOURCE_EXHAUSTED"),
        # A signed bundle that could not be installed: the upload was well-formed, its
        # content was refused (verification, load, selftest) and the old version serves on.
        BundleRejected: ErrorStatus(422, "bundle_rejected", "FAILED_PRECONDITION"),
        # A fleet document that failed verification: nothing changed.
        DocumentRefused: ErrorStatus(422, "document_refused", "FAILED_PRECONDITION"),
        # gRPC: UNAVAILABLE, as Triton answers a full queue, so clients' retry policies
        # (which retry UNAVAILABLE) back off and retry; RESOURCE_EXHAUSTED is what grpc
        # itself answers for a message over its size limit, like 413.
        Busy: ErrorStatus(429, "busy", "UNAVAILABLE"),
        # Failures while answering: the message names the adapter or model and the cause.
        InferenceFailed: ErrorStatus(500, "inference_failed", "INTERNAL"),
        FallbackFailed: ErrorStatus(500, "fallback_failed", "INTERNAL"),
        # Raw backend text (ONNX Runtime / LiteRT messages, cache paths) stays in the log;
        # at request time the service reports backend failures as InferenceFailed.
        BackendError: ErrorStatus(500, "backend_error", "INTERNAL", internal=True),
        # The daemon's own configuration: nothing a client can act on.
        ConfigError: ErrorStatus(500, "config_error", "INTERNAL", internal=True),
        # The upstream (cloud fallback endpoint) gave no usable answer.
        CloudUnavailable: ErrorStatus(502, "cloud_unavailable", "UNAVAILABLE"),
        NotReady: ErrorStatus(503, "not_ready", "UNAVAILABLE"),
        # The disk under state_dir is full: the upload is dropped and nothing changed.
        InsufficientStorage: ErrorStatus(507, "insufficient_storage", "RESOURCE_EXHAUSTED"),
        DeadlineExceeded: ErrorStatus(504, "deadline_exceeded", "DEADLINE_EXCEEDED"),
    }
)
"""Error class → answer. Subclasses answer like their nearest mapped parent."""


def status_of(exc: BaseException) -> ErrorStatus:
    """The answer for ``exc``: its nearest mapped class in the MRO, else `INTERNAL`."""
    for cls in type(exc).__mro__:
        found = TABLE.get(cls)
        if found is not None:
            return found
    return INTERNAL


def log_failure(transport: str, where: str, exc: BaseException, answer: ErrorStatus) -> None:
    """Log what the client is not told, one line in one shape for every transport (logger
    ``wasmgate.requests``; fields ``transport``, ``status``, ``code``): internal errors with
    their traceback, other server errors as one line; client mistakes are the client's
    business and not logged."""
    if answer.status < 500:
        return
    fields = {"transport": transport, "status": answer.status, "code": answer.code}
    if answer.internal:
        log.error("%s %s -> %d %s", transport, where, answer.status, answer.code,
                        exc_info=exc, extra=fields)  # fmt: skip
    else:
        log.warning("%s %s -> %d %s: %s", transport, where, answer.status, answer.code,
                          exc, extra=fields)  # fmt: skip


def public_message(exc: BaseException, status: ErrorStatus) -> str:
    """What the client may read: the error's own message, unless it is internal."""
    if status.internal:
        return INTERNAL_MESSAGE
    return str(exc) or type(exc).__name__


def error_of_answer(status: int, body: bytes) -> Exception:
    """The error an error answer of this table stands for (status → the first class mapped
    to it; the V2 body's ``error`` as the message): how a process that relayed a call to
    another over HTTP (a worker's gRPC management RPCs to its supervisor) answers in its
    own transport. A status no class has is an internal error (not a `DaemonError`)."""
    try:
        message = str(msgspec.json.decode(body).get("error", ""))
    except (msgspec.DecodeError, AttributeError):
        message = ""
    for cls, answer in TABLE.items():
        if answer.status == status and not answer.internal:
            return cls(message or f"HTTP {status}")
    return RuntimeError(f"answered {status}: {message}")

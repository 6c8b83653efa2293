"""The runtime's error hierarchy. No HTTP or MQTT codes here: every transport answers with
the one table in `wasmgate.runtime.protocol.error_table`."""

UNKNOWN_MODEL = "Request for unknown model: "
"""How Triton starts the message of every request to a model or version it cannot serve;
Triton's clients (and programs written against them) match on it."""


def unknown_model(name: str, what: str, detail: str) -> str:
    """Triton's text (``Request for unknown model: 'x' is not found``), then ours in
    parentheses: ``what`` is Triton's own ending (``is not found``, ``version 3 is not
    found``, ``has no available versions``, ``version 3 is not at ready state``)."""
    return f"{UNKNOWN_MODEL}'{name}' {what} ({detail})"


class DaemonError(Exception):
    """Root of every error the daemon raises on purpose."""


class ConfigError(DaemonError):
    """The configuration file or environment is unreadable or invalid."""


class BadRequest(DaemonError):
    """The request itself is malformed (bad JSON, wrong shape, wrong datatype)."""


class NotFound(DaemonError):
    """No adapter or model of that name (or version) is installed."""


class PayloadTooLarge(DaemonError):
    """The request body or payload is larger than the configured or manifest limit."""


class Busy(DaemonError):
    """Admission control refused the request: in-flight and queue limits are full."""


class DeadlineExceeded(DaemonError):
    """The request's deadline passed before an answer was ready."""


class NotReady(DaemonError):
    """The daemon or the model is not ready to serve (starting, draining, loading)."""


class InferenceFailed(DaemonError):
    """Local inference failed (backend error, sandbox trap, adapter error)."""


class Unauthorized(DaemonError):
    """A management call came without a valid bearer token."""


class Forbidden(DaemonError):
    """The call is switched off here (the management API without a configured token)."""


class InsufficientStorage(DaemonError):
    """The daemon's disk is full (ENOSPC, quota): nothing was changed, retry after freeing."""


class BackendError(DaemonError):
    """A backend could not load or run a model."""


class FallbackFailed(DaemonError):
    """Both local inference and the cloud fallback failed; the message names both causes."""


class BundleRejected(DaemonError):
    """A bundle was not installed (verification, compile, model load, name clash, selftest).

    The version already serving (if any) is untouched; the message says which step failed.
    """


class CloudUnavailable(DaemonError):
    """The cloud fallback endpoint gave no usable answer (timeout, refused, HTTP error,
    malformed answer, circuit breaker open); the message names the cause."""

    def __init__(self, *args: object, refused: bool = False) -> None:
        super().__init__(*args)
        self.refused = refused
        """The endpoint is up and refused this request (a 4xx other than 429): sending the
        same request later would be refused again, so it is never deferred."""


class DocumentRefused(DaemonError):
    """A fleet document was refused (signature, role, scope, expiry, replay, downgrade);
    nothing changed and the message names the check that failed."""

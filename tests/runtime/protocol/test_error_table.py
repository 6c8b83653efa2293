"""The error table: every daemon error mapped on purpose; client mistakes never fall back."""

from __future__ import annotations

import inspect

import pytest

from wasmgate.runtime import errors
from wasmgate.runtime.cloud.policy import FallbackRunner
from wasmgate.runtime.protocol.error_table import (
    INTERNAL,
    INTERNAL_MESSAGE,
    TABLE,
    error_of_answer,
    public_message,
    status_of,
)
from wasmgate.runtime.served.loaded import FallbackPolicy

DAEMON_ERRORS = sorted(
    (
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.DaemonError) and cls is not errors.DaemonError
    ),
    key=lambda cls: cls.__name__,
)
ALL_ON = FallbackPolicy(True, True, True, True, True, True)


def test_every_daemon_error_is_mapped_by_name() -> None:
    # Mapped directly, not inherited from DaemonError: a new class fails here until it is
    # given a status on purpose.
    assert set(TABLE) == set(DAEMON_ERRORS)
    assert len({answer.code for answer in TABLE.values()}) == len(TABLE)


@pytest.mark.parametrize(
    ("cls", "status"),
    [
        (errors.BadRequest, 400),
        (errors.Unauthorized, 401),
        (errors.Forbidden, 403),
        (errors.NotFound, 404),
        (errors.PayloadTooLarge, 413),
        (errors.BundleRejected, 422),
        (errors.Busy, 429),
        (errors.InferenceFailed, 500),
        (errors.FallbackFailed, 500),
        (errors.BackendError, 500),
        (errors.ConfigError, 500),
        (errors.CloudUnavailable, 502),
        (errors.NotReady, 503),
        (errors.DeadlineExceeded, 504),
        (errors.InsufficientStorage, 507),
    ],
)
def test_status_of_each_error(cls: type[errors.DaemonError], status: int) -> None:
    assert status_of(cls("x")).status == status


GRPC_CODES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    413: "RESOURCE_EXHAUSTED", 422: "FAILED_PRECONDITION", 429: "UNAVAILABLE", 500: "INTERNAL",
    502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 507: "RESOURCE_EXHAUSTED",
}  # fmt: skip


def test_grpc_column_is_a_real_status_code_chosen_per_http_status() -> None:
    import grpc  # noqa: PLC0415 - only this test needs it

    for answer in [*TABLE.values(), INTERNAL]:
        assert grpc.StatusCode[answer.grpc] is not grpc.StatusCode.OK
        assert answer.grpc == GRPC_CODES[answer.status], answer


def test_subclasses_answer_like_their_parent_and_bugs_are_internal() -> None:
    class QueueFull(errors.Busy):
        pass

    assert status_of(QueueFull()) == TABLE[errors.Busy]
    assert status_of(ValueError("x")) is INTERNAL
    assert status_of(KeyError("x")).status == 500


@pytest.mark.parametrize("cls", DAEMON_ERRORS, ids=lambda cls: cls.__name__)
def test_messages_are_public_unless_internal(cls: type[errors.DaemonError]) -> None:
    answer = status_of(cls("/var/lib/wasmgate/secret"))
    shown = public_message(cls("/var/lib/wasmgate/secret"), answer)
    assert (shown == INTERNAL_MESSAGE) is answer.internal
    assert public_message(RuntimeError("/secret"), INTERNAL) == INTERNAL_MESSAGE


@pytest.mark.parametrize("cls", DAEMON_ERRORS, ids=lambda cls: cls.__name__)
def test_client_mistakes_never_go_to_the_cloud(cls: type[errors.DaemonError]) -> None:
    runner = FallbackRunner(cloud=object())  # type: ignore[arg-type]  # never called here
    if status_of(cls()).status < 500 and cls is not errors.Busy:
        assert not runner.wants(ALL_ON, cls("client mistake"))


@pytest.mark.parametrize("cls", [c for c in DAEMON_ERRORS if not TABLE[c].internal])
def test_an_error_answer_relayed_is_answered_alike(cls: type[errors.DaemonError]) -> None:
    # A worker relays a gRPC management call to its supervisor over HTTP: the answer it
    # gives its client must have the status, the gRPC code and the message HTTP gave.
    answer = TABLE[cls]
    relayed = error_of_answer(answer.status, b'{"error": "no such model: m"}')
    again = status_of(relayed)
    assert (again.status, again.grpc) == (answer.status, answer.grpc)
    assert public_message(relayed, again) == "no such model: m"


def test_an_answer_no_class_has_is_internal() -> None:
    for body in (b'{"error": "secret path /x"}', b"not json", b"[]"):
        relayed = error_of_answer(418, body)
        assert status_of(relayed) is INTERNAL
        assert public_message(relayed, INTERNAL) == INTERNAL_MESSAGE

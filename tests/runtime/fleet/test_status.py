"""Reading other gateways' deployment reports (`parse_report`): fields a newer daemon adds
are ignored at every level, but a report whose known fields have the wrong type is refused
(shown as unreadable), and ``status --json`` prints what was read as plain JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from wasmgate.runtime.fleet.status import (
    Report,
    parse_report,
    split_topics,
    status_json,
    status_table,
)

MINIMAL = {"format": "wasmgate-deployment/1", "gateway": "gw-1"}
FULL: dict[str, Any] = {
    **MINIMAL,
    "groups": ["g1"],
    "serial": 3,
    "state": "applied",
    "reason": None,
    "refused": {"serial": 2, "error": "FleetReplayError: serial 2"},
    "last_failure": {
        "serial": 2,
        "bundle": "probe",
        "version": 2,
        "error": "boom: fix it",
        "at": "2024-05-01T09:00:00Z",
    },
    "bundles": {
        "probe": {
            "version": 1,
            "digest": "sha256:ab",
            "state": "applied",
            "error": None,
            "staged_percent": 50,
        },
    },
    "time": "2024-05-01T10:00:00Z",
}


def _parse(obj: object) -> Report | None:
    return parse_report(json.dumps(obj).encode())


def test_a_full_report_reads_and_prints_back_as_sent() -> None:
    report = _parse(FULL)
    assert report is not None
    assert report.time == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert report.bundles["probe"].staged_percent == 50
    assert report.fleet_versions() == {"probe": 1}
    view = split_topics("wg", {"wg/gw-1/deployment": json.dumps(FULL).encode()})
    assert status_json(view, None)["gateways"] == [{**FULL, "drift": None}]


def test_a_rolled_back_failure_reads_as_failed_with_its_whole_reason() -> None:
    long = "RegistryPlainHttp: GET https://r/v2/x/manifests/sha256:" + "4d" * 32 + ": fix it"
    sent = {**FULL, "last_failure": {**FULL["last_failure"], "error": long}, "refused": None}
    view = split_topics("wg", {"wg/gw-1/deployment": json.dumps(sent).encode()})
    table, _, problems = status_table(view, None).partition("\n\n")
    assert table.splitlines()[1].split()[:4] == ["gw-1", "failed,", "rolled", "back"]
    assert problems == f"gw-1: serial 2 failed (probe v2), rolled back: {long}"
    fresh = {**FULL, "last_failure": None, "refused": None}
    view = split_topics("wg", {"wg/gw-1/deployment": json.dumps(fresh).encode()})
    assert "\n\n" not in status_table(view, None)  # nothing to say: no lines below
    assert status_table(view, None).splitlines()[1].split()[1] == "applied"


def test_a_minimal_report_takes_the_defaults() -> None:
    report = _parse(MINIMAL)
    assert report is not None
    assert (report.groups, report.bundles, report.serial, report.time) == ([], {}, None, None)


@pytest.mark.parametrize(
    "newer",
    [
        {**FULL, "uptime_s": 5, "hardware": {"npu": True}},
        {**FULL, "refused": {**FULL["refused"], "at": "2024-05-01T10:00:00Z"}},
        {**FULL, "bundles": {"probe": {**FULL["bundles"]["probe"], "selftest_ms": 3}}},
    ],
    ids=["top", "refused", "bundle"],
)
def test_fields_a_newer_daemon_adds_are_ignored(newer: dict[str, Any]) -> None:
    report = _parse(newer)
    assert report is not None
    assert report == _parse(FULL)


@pytest.mark.parametrize(
    "bad",
    [
        {**MINIMAL, "format": "wasmgate-deployment/2"},
        {"gateway": "gw-1"},
        {**MINIMAL, "gateway": 5},
        {**MINIMAL, "groups": "g1"},
        {**MINIMAL, "groups": [1]},
        {**MINIMAL, "serial": "three"},
        {**MINIMAL, "serial": 3.5},
        {**MINIMAL, "serial": True},
        {**MINIMAL, "state": 1},
        {**MINIMAL, "bundles": []},
        {**MINIMAL, "bundles": {"probe": {"version": "one"}}},
        {**MINIMAL, "refused": {"error": None}},
        {**MINIMAL, "time": "yesterday"},
        [MINIMAL],
        None,
    ],
)
def test_a_wrongly_typed_report_is_refused(bad: object) -> None:
    assert _parse(bad) is None


@pytest.mark.parametrize("payload", [b"", b"{", b"\xff{not json", b"[" * 100_000])
def test_a_payload_that_is_not_json_is_refused(payload: bytes) -> None:
    assert parse_report(payload) is None


def test_numbers_and_times_convert_as_they_always_did() -> None:
    # Reports were always read leniently (pydantic's default): "3" is 3, a Unix time a time.
    report = _parse({**MINIMAL, "serial": "3", "time": 1714557600})
    assert report is not None
    assert (report.serial, report.time) == (3, datetime(2024, 5, 1, 10, tzinfo=UTC))
    offset = _parse({**MINIMAL, "time": "2024-05-01T12:00:00+02:00"})
    assert offset is not None
    assert offset.time is not None
    assert offset.time.utcoffset() == timedelta(hours=2)
    assert offset.time == datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=2)))

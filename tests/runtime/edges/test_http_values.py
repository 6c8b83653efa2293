"""Hostile values at the HTTP edge of a real daemon: 400 naming the field, never a 500.

Attack: non-finite and out-of-range timeouts (header and V2 parameter, JSON ``NaN`` and
``10**400``), absurd shapes, 100k-deep JSON. After all of them, an ordinary deadline still
fires (a NaN deadline used to break the event loop's timer ordering) and the probe adapter
(``max_in_flight = 1``) still serves another client.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.runtime.edges.probe import probe_daemon, request

TIMEOUT = "X-Wasmgate-Timeout-Ms"
BAD_HEADER_VALUES = ("nan", "NaN", "inf", "-inf", "1e999", "-5", "0", "soon", "1e400")


def _v2(timeout_json: str, entry: str = '{"name": "payload", "datatype": "BYTES", '
        '"shape": [1], "data": ["Pok"]}') -> bytes:  # fmt: skip
    # Raw text: json.dumps cannot write NaN-free 10**400 literals the way an attacker can.
    return f'{{"parameters": {{"timeout": {timeout_json}}}, "inputs": [{entry}]}}'.encode()


BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("/v2/models/probe/infer", _v2("NaN"), "'timeout'"),
    ("/v2/models/probe/infer", _v2("Infinity"), "'timeout'"),
    ("/v2/models/probe/infer", _v2("1" + "0" * 400), "'timeout'"),
    ("/v2/models/probe/infer", _v2("1e999"), "'timeout'"),
    ("/v2/models/probe/infer", _v2("-1"), "'timeout'"),
    ("/v2/models/probe/infer", _v2('"soon"'), "'timeout'"),
    (
        "/v2/models/double/infer",
        json.dumps(
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [0, 2**64], "data": []}]}
        ).encode(),
        "'shape'",
    ),
    (
        "/v2/models/probe/infer",
        json.dumps(
            {"inputs": [{"name": "payload", "datatype": "BYTES", "shape": [0, 2**70], "data": []}]}
        ).encode(),
        "'shape'",
    ),
    ("/v2/models/double/infer", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("/v2/models/double/infer", b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deeply"),
]


def test_hostile_values_get_400_naming_the_field_and_deadlines_still_fire(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory, limits={"max_in_flight": 1})
    for value in BAD_HEADER_VALUES:
        for path in ("/v1/adapters/probe", "/v2/models/probe/infer"):
            got = request(daemon.port, "POST", path, _v2("1000"), {TIMEOUT: value})
            assert got.status == 400, (value, got)
            assert TIMEOUT in got.json()["error"], got
    for path, body, field in BAD_BODIES:
        got = request(daemon.port, "POST", path, body)
        assert got.status == 400, (path, body[:80], got)
        assert field in got.json()["error"], got

    # An ordinary deadline still fires (504, not a late or missing answer) ...
    looping = request(daemon.port, "POST", "/v1/adapters/probe", b"L", {TIMEOUT: "300"})
    assert looping.status == 504, looping
    # ... and the single slot of the adapter is free again for the next client.
    ok = request(daemon.port, "POST", "/v1/adapters/probe", b"Pok", {TIMEOUT: "20000"})
    assert (ok.status, ok.body) == (200, b"v1:ok")
    assert "Traceback" not in daemon.log()


def test_ordinary_timeouts_are_still_accepted(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory)
    for value in ("250", "2.5e2", " 250.0"):
        got = request(daemon.port, "POST", "/v1/adapters/probe", b"L", {TIMEOUT: value})
        assert got.status == 504, (value, got)

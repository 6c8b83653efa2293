"""Plain log lines: ``key=value`` fields read as docs/operator.md shows them, never as a
Python repr, and a value still cannot break the line."""

from __future__ import annotations

import logging

from wasmgate.runtime.ops.logs import PlainFormatter, plain_value


def _line(**extra: object) -> str:
    record = logging.makeLogRecord({"name": "wasmgate.t", "levelname": "INFO", "msg": "m"})
    record.__dict__.update(extra)
    return PlainFormatter().format(record)


def test_values_for_a_person() -> None:
    assert plain_value(["127.0.0.1:8080", "[::1]:8080"]) == "127.0.0.1:8080,[::1]:8080"
    assert plain_value(True) == "true"
    assert plain_value(False) == "false"
    assert plain_value(None) == "none"
    assert plain_value([]) == "none"
    assert plain_value({"b", "a"}) == "a,b"
    assert plain_value({"version": 2, "root_signed": False}) == "version:2,root_signed:false"
    assert plain_value(9.1) == "9.1"


def test_a_line_has_no_repr_and_no_second_line() -> None:
    line = _line(addresses=["127.0.0.1:8080"], root_signed=False, names=["a\nCRITICAL b"])
    assert line.endswith(" m addresses=127.0.0.1:8080 root_signed=false names=a\\nCRITICAL b")
    assert "\n" not in line
    assert "[" not in line

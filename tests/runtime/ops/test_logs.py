"""Plain log lines: ``key=value`` fields read as docs/operator.md shows them, never as a
Python repr, and a value still cannot break the line."""

from __future__ import annotations

import logging

import pytest

from wasmgate.runtime.ops.logs import PlainFormatter, Throttled, plain_value


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


def test_throttled_logs_once_per_interval_per_key_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    throttled = Throttled(logging.getLogger("t"), every_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for _ in range(500):  # one outage, every request fails alike
            throttled.warning("edge", "cloud away", {"e": "refused"})
        throttled.warning("other", "cloud away", {"e": "refused"})  # its own key
        now[0] += 59.9
        throttled.warning("edge", "cloud away", {"e": "refused"})
        assert [r.__dict__.get("suppressed") for r in caplog.records] == [None, None]
        now[0] += 0.1
        throttled.warning("edge", "cloud away", {"e": "still refused"})
    last = caplog.records[-1]
    assert (len(caplog.records), last.__dict__["suppressed"], last.__dict__["e"]) == (
        3, 500, "still refused"
    )  # fmt: skip
    now[0] += 3600
    with caplog.at_level(logging.WARNING, logger="t"):
        throttled.warning("edge", "cloud away", {"e": "refused"})
    assert "suppressed" not in caplog.records[-1].__dict__  # nothing was left out since

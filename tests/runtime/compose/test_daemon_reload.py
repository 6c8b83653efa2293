"""What a SIGHUP reload takes from the new config file, and what waits for a restart."""

from __future__ import annotations

import logging

import pytest

from wasmgate.runtime.compose import lifecycle
from wasmgate.runtime.ops.config import Settings
from wasmgate.typed import convert


def _settings(**limits: int) -> Settings:
    return convert({"limits": limits, "http": {"management_token": "old"}}, Settings, strict=False)


def test_pool_sizes_keep_their_running_value_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    # The worker and batch pools are built once at start: a reload that took the new
    # counts would leave the running settings (which the next reload compares against)
    # naming thread counts the daemon does not have, and nobody told to restart.
    old = _settings(workers=4, batch_workers=2, max_in_flight=64)
    new = _settings(workers=2, batch_workers=1, max_in_flight=8)
    with caplog.at_level(logging.WARNING, logger="wasmgate.daemon"):
        kept = lifecycle.keep_restart_only(old, new)
    assert (kept.limits.workers, kept.limits.batch_workers) == (4, 2)
    assert kept.limits.max_in_flight == 8  # the other limits apply at once
    warned = [r.getMessage() for r in caplog.records]
    assert "limits.workers changed: takes effect after a restart" in warned
    assert "limits.batch_workers changed: takes effect after a restart" in warned


def test_unchanged_pool_sizes_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    old = _settings(workers=4, max_in_flight=64)
    with caplog.at_level(logging.WARNING, logger="wasmgate.daemon"):
        kept = lifecycle.keep_restart_only(old, _settings(workers=4, max_in_flight=32))
    assert kept.limits.max_in_flight == 32
    assert not [r for r in caplog.records if "limits." in r.getMessage()]


def test_the_listener_waits_for_a_restart_and_the_token_applies_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = convert({"http": {"port": 8080, "management_token": "old"}}, Settings, strict=False)
    new = convert({"http": {"port": 9090, "management_token": "new"}}, Settings, strict=False)
    with caplog.at_level(logging.WARNING, logger="wasmgate.daemon"):
        kept = lifecycle.keep_restart_only(old, new)
    assert (kept.http.port, kept.http.management_token) == (8080, "new")
    assert "http.port changed: takes effect after a restart" in caplog.messages

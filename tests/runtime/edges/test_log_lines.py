"""A guest cannot forge journal lines: control characters in its log text are escaped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.runtime.edges.probe import probe_daemon, request

FORGED = "2026-12-01T00:00:00 CRITICAL wasmgate.daemon: trust store replaced"


def test_guest_log_lines_cannot_forge_journal_lines(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    config = {"log": {"format": "plain", "level": "DEBUG"}}
    daemon = probe_daemon(tmp_path, daemon_factory, config)
    for sep in ("\n", "\r\n", "\r", "\u2028", "\x1b[2K\r"):
        got = request(daemon.port, "POST", "/v1/adapters/probe", f"Gbenign{sep}{FORGED}".encode())
        assert got.status == 200, got
    lines = daemon.log().splitlines()
    assert not [line for line in lines if line.startswith(FORGED[:20])], "a forged line"
    guest = [line for line in lines if "guest: " in line and FORGED in line]
    assert len(guest) == 5, guest  # each request's log text stays on its own one line
    assert any("benign\\n2026-12-01T00:00:00 CRITICAL" in line for line in guest)
    assert not [line for line in guest if "\x1b" in line or "\r" in line]

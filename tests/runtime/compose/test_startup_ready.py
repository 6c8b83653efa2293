"""READY=1 still means "serving every start-up bundle" now that they load side by side.

A real ``wasmgate serve`` with three signed bundles and systemd's notification socket of
our own, started twice on one data directory: the restart loads the three stored bundles
at once and stages the three files meanwhile. Its READY=1 must come after a STATUS /
start-timeout extension for each of the six, name all three adapters, and each adapter
must answer.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.notify_socket import Datagram, NotifySocket
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name

NAMES = ("alpha", "beta", "gamma")


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[NotifySocket]:
    s = NotifySocket(tmp_path / "notify")
    yield s
    s.close()


@pytest.fixture
def daemon(tmp_path: Path, sock: NotifySocket) -> Iterator[Daemon]:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    for name in NAMES:
        kit.build(name, 1, model_name=f"double_{name}", out_dir=bundles)
    config = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "profile": host_profile_name(),
    }
    d = Daemon(tmp_path / "d", config, (), {"NOTIFY_SOCKET": sock.address})
    try:
        yield d
    finally:
        d.stop(timeout=15)


def _post(url: str, body: bytes) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as r:
        return bytes(r.read())


def _until_ready(sock: NotifySocket, after: int) -> list[Datagram]:
    """The datagrams after the first ``after``, up to and including the next READY=1."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = sock.messages()[after:]
        for i, d in enumerate(new):
            if d.fields.get("READY") == "1":
                return new[: i + 1]
        time.sleep(0.02)
    raise AssertionError(f"no READY=1 after the restart: {sock.messages()[after:]}")


def test_ready_after_a_side_by_side_start_serves_every_bundle(
    daemon: Daemon, sock: NotifySocket
) -> None:
    daemon.start(timeout=120)
    _until_ready(sock, 0)
    daemon.stop(timeout=15)
    seen = len(sock.messages())
    daemon.start(timeout=120)  # the store holds all three: they load side by side
    restart = _until_ready(sock, seen)
    assert "serving 3 adapters, 3 models" in restart[-1].fields["STATUS"]
    loading = [d.fields["STATUS"] for d in restart if "EXTEND_TIMEOUT_USEC" in d.fields]
    assert sorted(s.split(" (")[0] for s in loading) == sorted(
        [f"loading {n}@1" for n in NAMES] + [f"loading {n}-1.wgb" for n in NAMES]
    )
    for name in NAMES:
        assert _post(f"{daemon.url}/v1/adapters/{name}", b"Pok") == b"v1:ok"

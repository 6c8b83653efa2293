"""systemd's ``STATUS=`` follows the bundles served: an install through the bundle folder
or the management API, and a removal, update it at once (it said ``serving 0 adapters,
0 models`` until the next reload)."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.notify_socket import NotifySocket
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name

TOKEN = "status-line-token"


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[NotifySocket]:
    s = NotifySocket(tmp_path / "notify")
    yield s
    s.close()


def status(sock: NotifySocket) -> str:
    return sock.with_field("STATUS")[-1].fields["STATUS"]


def wait_status(sock: NotifySocket, text: str) -> None:
    sock.wait_for("STATUS", text, timeout=60)
    assert status(sock) == text


def call(daemon: Daemon, method: str, path: str, body: bytes | None = None) -> int:
    req = urllib.request.Request(
        daemon.url + path, data=body, method=method, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return int(r.status)


@pytest.mark.timeout(180)
def test_status_follows_installs_and_removals(
    tmp_path: Path, sock: NotifySocket, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    config: dict[str, Any] = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "profile": host_profile_name(),
        "http": {"management_token": TOKEN},
    }
    daemon = daemon_factory(config=config, env={"NOTIFY_SOCKET": sock.address}, name="d")
    assert sock.wait_for("READY", "1").fields["STATUS"] == "serving 0 adapters, 0 models"
    # The folder: copied under another name, then moved in (as docs/deploy.md says).
    built = kit.build("probe", 1)
    shutil.copyfile(built, bundles / ".probe-1.tmp")
    (bundles / ".probe-1.tmp").rename(bundles / "probe-1.wgb")
    wait_status(sock, "serving 1 adapters, 1 models")
    # The management API.
    other = kit.build("other", 1, model_name="other-double")
    assert call(daemon, "PUT", "/v1/bundles", other.read_bytes()) == 201
    wait_status(sock, "serving 2 adapters, 2 models")
    assert call(daemon, "DELETE", "/v1/bundles/other") in {200, 204}
    wait_status(sock, "serving 1 adapters, 1 models")

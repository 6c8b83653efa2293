"""Listen first, load after: a daemon whose bundles are still loading answers
``/v2/health/live``, the status page and ``/v1/status`` (with the progress), says
``ready: false`` and sends systemd no READY=1; once the loading is done it is ready.

The loading is held by the test, not slowed by a sleep: the daemon runs under
`tests.fixtures.held_start`, whose start-up loading waits on a FIFO the test opens when it
has seen what it wants (see that module). Three real signed bundles, a real daemon.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.held_start import ENV, make_hold, release
from tests.fixtures.notify_socket import NotifySocket
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name

NAMES = ("alpha", "beta", "gamma")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Daemon, Path, NotifySocket]]:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    for name in NAMES:
        kit.build(name, 1, model_name=f"double_{name}", out_dir=bundles)
    config = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "profile": host_profile_name(),
    }
    hold = tmp_path / "hold"
    make_hold(hold)
    sock = NotifySocket(tmp_path / "notify")
    env = {"NOTIFY_SOCKET": sock.address, ENV: str(hold), "PYTHONPATH": str(REPO)}
    d = Daemon(tmp_path / "d", config, (), env, module="tests.fixtures.held_start")
    try:
        yield d, hold, sock
    finally:
        release(hold)  # a failed test must not leave the daemon blocked on the FIFO
        d.stop(timeout=15)
        sock.close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, bytes(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _post(url: str, body: bytes) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as r:
            return r.status, bytes(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_listener_answers_while_bundles_load_then_ready(
    held: tuple[Daemon, Path, NotifySocket],
) -> None:
    daemon, hold, sock = held
    daemon.start(ready=False)
    daemon.wait_ready(60, "/v2/health/live")
    assert _get(f"{daemon.url}/v2/health/live") == (200, b'{"live": true}')
    code, _ = _get(f"{daemon.url}/v2/health/ready")
    assert code == 503
    status = json.loads(_get(f"{daemon.url}/v1/status")[1])
    assert status["ready"] is False
    assert status["components"]["loading"]["state"] in ("waiting", "loading")
    assert status["components"]["loading"]["loaded"] == 0
    page = _get(f"{daemon.url}/")
    assert page[0] == 200
    assert b'id="loading"' in page[1]
    code, body = _post(f"{daemon.url}/v1/adapters/alpha", b"M")
    assert code == 503, body
    # Not 404 for a name not loaded yet: a client (another gateway's cloud fallback) that
    # took 404 for an answer would give up on a request a retry would serve.
    v2 = b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}'
    for name in ("alpha", "double_alpha", "nothing"):
        code, body = _post(f"{daemon.url}/v2/models/{name}/infer", v2)
        assert (code, b"still loading" in body) == (503, True), body
        code, body = _get(f"{daemon.url}/v2/models/{name}")
        assert (code, b"still loading" in body) == (503, True), body
    assert not sock.with_field("READY", "1")  # systemd: not ready while loading
    # The first lines say where the status page is, before any bundle is loaded.
    log = daemon.log()
    assert f"status page: http://127.0.0.1:{daemon.port}/" in log
    assert "loading bundle 1/" not in log

    release(hold)
    daemon.wait_ready(60)
    status = json.loads(_get(f"{daemon.url}/v1/status")[1])
    assert status["ready"] is True
    loading = status["components"]["loading"]
    assert (loading["state"], loading["loaded"], loading["total"]) == ("done", 3, 3)
    assert loading["loading"] == []
    for name in NAMES:
        assert _post(f"{daemon.url}/v1/adapters/{name}", b"Pok") == (200, b"v1:ok")
    assert _post(f"{daemon.url}/v2/models/nothing/infer", v2)[0] == 404
    log = daemon.log()
    assert log.index("status page:") < log.index("loading bundle 1/")
    readies = sock.with_field("READY", "1")
    assert len(readies) == 1
    assert "3 adapters" in readies[0].fields.get("STATUS", "")


def test_the_status_page_shows_the_loading_line(
    held: tuple[Daemon, Path, NotifySocket], tmp_path: Path
) -> None:
    daemon, _hold, _sock = held
    daemon.start(ready=False)
    daemon.wait_ready(60, "/v2/health/live")
    binary = shutil.which("chromium")
    assert binary is not None, "install Debian's chromium: apt-get install -y chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}"]
    dom = ""
    for budget in (3000, 10000, 30000):  # virtual time may outrun the fetch on a busy machine
        cmd = [binary, *flags, f"--virtual-time-budget={budget}", "--dump-dom", daemon.url]
        dom = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True).stdout
        if 'data-state="loaded"' in dom:
            break
    assert 'data-state="loaded"' in dom, dom[-2000:]  # rendered without a script error
    line = dom.split('id="loading"', 1)[1].split("</span>", 1)[0]
    assert "hidden" not in line.split(">", 1)[0], line
    assert "loading bundles…" in line, line  # held before the loading counted its bundles
    assert ">not ready<" in dom
    assert "no adapters installed" in dom  # the empty tables render (a script error would not)
    assert "no models installed" in dom


def test_a_stop_while_loading_ends_the_start(held: tuple[Daemon, Path, NotifySocket]) -> None:
    """SIGTERM during the loading stops the daemon cleanly: no READY=1, nothing loaded after
    the stop, exit 0 (the held loading thread is let go so the process can end)."""
    daemon, hold, sock = held
    daemon.start(ready=False)
    daemon.wait_ready(60, "/v2/health/live")
    proc = daemon.proc
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while not sock.with_field("STOPPING", "1"):  # the stop is under way before the release
        assert time.monotonic() < deadline, daemon.log()
        time.sleep(0.05)
    release(hold)
    assert proc.wait(timeout=60) == 0, daemon.log()
    log = daemon.log()
    assert "stopped" in log
    assert "loading bundle 1/" not in log  # the cancelled start loaded nothing
    assert not sock.with_field("READY", "1")

"""Cloud fallback through the composed daemon: a second wasmgate plays the cloud (V2 HTTP).

The edge daemon runs bundle ``probe`` (tag ``edge``) with fallback allowed; the cloud daemon
runs ``probe`` (tag ``cloud``). A guest that asks for fallback is answered by the cloud,
an adapter error goes to the cloud, a bad request never does, and with the cloud down the
error names both causes.
"""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Self

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.runtime.bundlekit import BundleKit
from tests.runtime.http.test_metrics import value
from tests.runtime.stack import host_profile_name

FALLBACK = {
    "allowed": True,
    "on_error": True,
    "on_adapter_request": True,
    "send_payload": True,
}


def _post(url: str, payload: bytes) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url, data=payload, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def _start(
    factory: Callable[..., Daemon],
    tmp: Path,
    kit: BundleKit,
    name: str,
    bundle: Path,
    **cfg: object,
) -> Daemon:
    bundles = tmp / name / "data" / "bundles"
    bundles.mkdir(parents=True)
    bundle.rename(bundles / bundle.name)
    config = {
        "paths": {"trust_file": kit.save_trust(tmp / f"trust-{name}.json")},
        "profile": host_profile_name(),
        **cfg,
    }
    return factory(config=config, name=name)


def test_cloud_answers_when_local_cannot(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BundleKit(tmp_path / "kit")
    cloud_bundle = kit.build("probe", 1, tag="cloud", out_dir=tmp_path)
    cloud = _start(daemon_factory, tmp_path, kit, "cloud", cloud_bundle)
    edge_bundle = kit.build("probe", 7, tag="edge", sections={"fallback": FALLBACK})
    edge = _start(daemon_factory, tmp_path, kit, "edge", edge_bundle, cloud={"url": cloud.url})
    url = f"{edge.url}/v1/adapters/probe"

    status, body, headers = _post(url, b"F")  # the guest asks for fallback
    assert (status, body, headers["X-Wasmgate-Source"]) == (200, b"cloud:local", "cloud")
    status, body, headers = _post(url, b"Phello")
    assert (status, body, headers["X-Wasmgate-Source"]) == (200, b"edge:hello", "local")
    status, body, _ = _post(url, b"B")  # the client's fault: never sent to the cloud
    assert status == 400
    status, body, _ = _post(url, b"E")  # local error, cloud error too: both named
    assert status == 500
    assert b"probe failed" in body

    cloud.stop()
    status, body, _ = _post(url, b"E")
    assert status == 500
    assert b"local:" in body
    assert b"cloud:" in body
    status, body, headers = _post(url, b"F")  # cloud down: the weak local answer stands
    assert (status, body, headers["X-Wasmgate-Source"]) == (200, b"edge:local", "local")
    state = edge.get_json("/v1/status")["components"]["cloud"]
    assert state["failures"] >= 1


def test_cloud_url_unreachable_does_not_stop_the_daemon(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BundleKit(tmp_path / "kit")
    bundle = kit.build("probe", 1, tag="edge", sections={"fallback": FALLBACK})
    dead = f"http://127.0.0.1:{free_port()}"
    edge = _start(daemon_factory, tmp_path, kit, "edge", bundle, cloud={"url": dead})
    assert _post(f"{edge.url}/v1/adapters/probe", b"M")[:2] == (200, b"edge:2,4,6,8")


class FailingCloud:
    """A loopback cloud that answers every call 503 (a breaker failure); counts the calls."""

    def __init__(self) -> None:
        self.calls = 0
        cloud = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                cloud.calls += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _breaker_gauge(edge: Daemon) -> float | None:
    with urllib.request.urlopen(f"{edge.url}/metrics", timeout=10) as r:
        return value(r.read().decode(), "wasmgate_fallback_breaker_state")


def test_breaker_gauge_follows_the_breaker_from_metrics_alone(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    # Only /metrics is read (never /v1/status): scraping must show the breaker as it is.
    kit = BundleKit(tmp_path / "kit")
    bundle = kit.build("probe", 1, tag="edge", sections={"fallback": FALLBACK})
    breaker = {"breaker_failures": 2, "breaker_reset_s": 3600}
    with FailingCloud() as cloud:
        cfg = {"cloud": {"url": cloud.url, **breaker}}
        edge = _start(daemon_factory, tmp_path, kit, "edge", bundle, **cfg)
        assert _breaker_gauge(edge) == 0  # closed
        for _ in range(2):  # local error, then the cloud fails: one breaker failure each
            assert _post(f"{edge.url}/v1/adapters/probe", b"E")[0] == 500
        assert cloud.calls == 2
        assert _breaker_gauge(edge) == 2  # open
        status, body, _ = _post(f"{edge.url}/v1/adapters/probe", b"E")
        assert status == 500
        assert b"circuit breaker open" in body
        assert cloud.calls == 2  # the open breaker kept the call local
        assert _breaker_gauge(edge) == 2

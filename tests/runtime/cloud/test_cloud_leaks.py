"""What may leave the gateway, against a real daemon and a loopback fake cloud that records.

- ``send_payload = false`` keeps the payload home on every path: the adapter's request for
  fallback and the direct V2 model fallback (a model that cannot load here) alike.
- A cloud ``307`` to another origin is not followed: the target never sees a request.
- An oversized chunked answer is refused while it streams, with the daemon's peak RSS bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import serving
from tests.reliability.conftest import post
from tests.runtime.trustkit import Tenants, daemon_config

MIB = 1024 * 1024
ALLOWED = {"allowed": True, "on_missing_model": True, "on_adapter_request": True}
ANSWER = b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 4], "data": [9, 9, 9, 9]}]}'
INFER = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}'


class FakeCloud:
    """Records every request (path, body); ``mode``: ok | redirect | huge."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.redirect_to = ""
        self.received: list[tuple[str, bytes]] = []
        self.huge_sent = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append((request.path, await request.read()))
        if self.mode == "redirect":
            raise web.HTTPTemporaryRedirect(self.redirect_to + request.path)
        if self.mode == "huge":
            return await self._huge(request)
        return web.Response(body=ANSWER, content_type="application/json")

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        chunk = b"[" + b"1," * (MIB // 2 - 1)
        try:
            for _ in range(768):  # 768 MiB, unless the client hangs up first
                await resp.write(chunk)
                self.huge_sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass
        return resp


def _peak_rss(daemon: Daemon) -> int:
    assert daemon.proc is not None
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    (line,) = [x for x in status.splitlines() if x.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


def test_payload_stays_home_redirects_are_not_followed_answers_are_capped(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants = Tenants(tmp_path / "kit", {"t": ["*"]})
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model: cannot load on this device")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    for name, send in (("home", False), ("away", True)):
        fallback = {**ALLOWED, "send_payload": send}
        tenants.build(
            "t", name, 1, model_file=broken, model_name=f"{name}-model",
            sections={"fallback": fallback}, out_dir=bundles,
        )  # fmt: skip
    cloud, target = FakeCloud(), FakeCloud()
    with serving(cloud.app()) as cloud_url, serving(target.app()) as target_url:
        config = daemon_config(
            tenants.write_trust(tmp_path / "trust.json"),
            cloud={"url": cloud_url, "timeout_s": 30, "max_answer_bytes": 4 * MIB},
        )
        daemon = daemon_factory(config=config, name="d")

        # send_payload = false: neither the model fallback nor the adapter's ask leaves.
        status, _, body = post(f"{daemon.url}/v2/models/home-model/infer", INFER)
        assert status >= 500
        assert b"cloud fallback not available" in body
        status, _, body = post(f"{daemon.url}/v1/adapters/home", b"F")
        assert (status >= 500, b"cloud fallback not available" in body) == (True, True)
        assert cloud.received == []
        # send_payload = true: the same request does reach the cloud (the test can fail).
        status, _, body = post(f"{daemon.url}/v2/models/away-model/infer", INFER)
        assert (status, b"[9.0,9.0,9.0,9.0]" in body.replace(b" ", b"")) == (200, True)
        assert [path for path, _ in cloud.received] == ["/v2/models/away-model/infer"]

        cloud.mode, cloud.redirect_to = "redirect", target_url
        status, _, body = post(f"{daemon.url}/v2/models/away-model/infer", INFER)
        assert status >= 500
        assert b"redirect" in body
        assert target.received == []

        cloud.mode = "huge"
        before = _peak_rss(daemon)
        status, _, body = post(f"{daemon.url}/v2/models/away-model/infer", INFER)
        assert status >= 500
        assert b"exceeds cloud.max_answer_bytes" in body
        assert _peak_rss(daemon) - before < 64 * MIB
        assert cloud.huge_sent < 128 * MIB  # the daemon hung up, it did not drain the stream
        cloud.mode = "ok"  # and the daemon still serves through the well-behaved cloud
        assert post(f"{daemon.url}/v2/models/away-model/infer", INFER)[0] == 200
        assert [p for p, _ in cloud.received if "home" in p] == []

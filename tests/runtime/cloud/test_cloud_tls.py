"""Cloud fallback over HTTPS: the client trusts ``cloud.tls_ca`` or else the system's CA
store, and nothing else; a refused certificate is a clear error, never an unverified call.

The cloud is a loopback aiohttp HTTPS stub (what the tests are not about) with a
self-signed certificate made by ``openssl``; "the system's store" is pointed at a test CA
with ``SSL_CERT_FILE``, which OpenSSL reads whenever a context loads its default paths.
The last test runs the real daemon (`wasmgate serve`, which imports aiohttp through
`wasmgate.runtime.http._aiohttp_private`) against the same stub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import self_signed_cert, server_tls, serving
from tests.runtime.bundlekit import BundleKit
from tests.runtime.cloud.test_daemon_fallback import FALLBACK, _post, _start
from wasmgate.runtime.cloud.client import CloudFallback
from wasmgate.runtime.errors import CloudUnavailable
from wasmgate.runtime.ops.config import CloudSettings


class Certs:
    """The stub's certificate (its own CA) and an unrelated one."""

    def __init__(self, tmp: Path) -> None:
        (tmp / "good").mkdir()
        (tmp / "other").mkdir()
        self.cert, self.key = self_signed_cert(tmp / "good")
        self.other, _ = self_signed_cert(tmp / "other")


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path)


@pytest.fixture
def cloud(certs: Certs) -> Iterator[str]:
    """The HTTPS stub's URL: ``/v1/adapters/<name>`` answers ``stub:`` + the payload."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=b"stub:" + await request.read())

    app = web.Application()
    app.router.add_post("/v1/adapters/{name}", answer)
    with serving(app, server_tls(certs.cert, certs.key)) as url:
        yield url


def _ask(url: str, tls_ca: Path | None) -> bytes:
    async def once() -> bytes:
        settings = CloudSettings(url=url, protocol="raw", tls_ca=tls_ca, breaker_failures=99)
        async with CloudFallback(settings) as client:
            return await client.infer_adapter("probe", b"x", None, "local_error")

    return asyncio.run(once())


def test_the_configured_ca_is_trusted(cloud: str, certs: Certs) -> None:
    assert _ask(cloud, certs.cert) == b"stub:x"


def test_a_certificate_the_configured_ca_did_not_sign_is_refused(
    cloud: str, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.cert))  # the system store would trust it
    with pytest.raises(CloudUnavailable) as err:
        _ask(cloud, certs.other)  # but tls_ca replaces the system store
    assert "certificate verify failed" in str(err.value), err.value


def test_without_tls_ca_the_system_store_decides(
    cloud: str, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.cert))
    assert _ask(cloud, None) == b"stub:x"
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.other))
    with pytest.raises(CloudUnavailable) as err:
        _ask(cloud, None)
    assert "certificate verify failed" in str(err.value), err.value


def test_the_daemon_falls_back_over_https_trusting_the_system_store(
    tmp_path: Path, cloud: str, certs: Certs, daemon_factory: Callable[..., Daemon]
) -> None:
    """The daemon's client makes its own context: aiohttp's import-time default, which the
    daemon leaves without roots, would refuse this cloud."""
    kit = BundleKit(tmp_path / "kit")
    bundle = kit.build("probe", 7, tag="edge", sections={"fallback": FALLBACK})
    env = {"SSL_CERT_FILE": str(certs.cert)}

    def factory(**kw: object) -> Daemon:
        return daemon_factory(**kw, env=env)

    edge = _start(factory, tmp_path, kit, "edge", bundle, cloud={"url": cloud, "protocol": "raw"})
    status, body, headers = _post(f"{edge.url}/v1/adapters/probe", b"F")  # asks for fallback
    assert (status, body, headers["X-Wasmgate-Source"]) == (200, b"stub:F", "cloud")

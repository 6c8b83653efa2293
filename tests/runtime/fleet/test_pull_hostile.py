"""A registry that lies or stalls: an endless layer, errors, silence. The puller's caps hold.

A real registry always sends ``Content-Length``; this small aiohttp server (loopback, a
thread of its own) does what a hostile or broken one could: stream a layer without a
length and without end, answer 500/429, or never answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.fixtures.net import serving
from wasmgate.runtime.fleet.pull import BundlePuller
from wasmgate.runtime.oci.ocitypes import (
    ARTIFACT_TYPE,
    LAYER_MEDIA_TYPE,
    ArtifactRefused,
    RegistryUnavailable,
    sha256_digest,
)
from wasmgate.runtime.ops.config import RegistrySettings
from wasmgate.typed import replace

DECLARED = 64 * 1024
LAYER = sha256_digest(b"\0" * DECLARED)
MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "artifactType": ARTIFACT_TYPE,
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": LAYER, "size": DECLARED}],
    }
).encode()
DIGEST = sha256_digest(MANIFEST)


class Hostile:
    """The server's behaviour, switched by the test; counts the requests it got."""

    def __init__(self) -> None:
        self.mode = "endless"
        self.requests = 0
        self.sent = 0

    async def manifest(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.mode in ("500", "429"):
            return web.Response(status=int(self.mode))
        if self.mode == "silent":
            await asyncio.sleep(5)  # far past timeout_s; bounded so the server can stop
        return web.Response(
            body=MANIFEST, content_type="application/vnd.oci.image.manifest.v1+json"
        )

    async def blob(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        response = web.StreamResponse()
        response.enable_chunked_encoding()  # no Content-Length: only counting can stop it
        await response.prepare(request)
        chunk = b"\0" * 65536
        for _ in range(100_000):  # bounded: 6.5 GB, far past any cap
            await response.write(chunk)
            self.sent += len(chunk)
        return response


@pytest.fixture
def hostile() -> Iterator[tuple[Hostile, str]]:
    h = Hostile()
    app = web.Application()
    app.router.add_get("/v2/{repo:.+}/manifests/{ref}", h.manifest)
    app.router.add_get("/v2/{repo:.+}/blobs/{digest}", h.blob)
    with serving(app) as url:
        yield h, url.removeprefix("http://")


def puller(tmp_path: Path, **settings: object) -> BundlePuller:
    conf = replace(RegistrySettings(insecure=True, retries=0), **settings)
    return BundlePuller(conf, tmp_path / "pulled")


async def test_an_endless_layer_is_cut_at_its_declared_size(
    hostile: tuple[Hostile, str], tmp_path: Path
) -> None:
    server, host = hostile
    p = puller(tmp_path, retries=3)
    with pytest.raises(ArtifactRefused, match=f"manifest says {DECLARED} bytes"):
        await p.pull(f"{host}/fleet/x@{DIGEST}")
    # one chunk past the declared size at most, and nothing kept
    assert DECLARED < p.stats.bytes_downloaded <= DECLARED + 256 * 1024
    assert [f for f in p.cache.root.rglob("*") if f.is_file()] == []
    assert server.requests == 2  # the manifest, the layer: refused, not retried


@pytest.mark.parametrize("status", ["500", "429"])
async def test_server_errors_are_retried_then_unavailable(
    hostile: tuple[Hostile, str], tmp_path: Path, status: str
) -> None:
    server, host = hostile
    server.mode = status
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    conf = RegistrySettings(insecure=True, retries=2, backoff_s=0.01)
    p = BundlePuller(conf, tmp_path / "pulled", sleep=no_wait)
    with pytest.raises(RegistryUnavailable, match=f"HTTP {status}"):
        await p.pull(f"{host}/fleet/x@{DIGEST}")
    assert (server.requests, len(waits)) == (3, 2)


async def test_a_silent_registry_times_out(hostile: tuple[Hostile, str], tmp_path: Path) -> None:
    server, host = hostile
    server.mode = "silent"
    p = puller(tmp_path, timeout_s=0.5)
    with pytest.raises(RegistryUnavailable, match="timed out"):
        async with asyncio.timeout(60):
            await p.pull(f"{host}/fleet/x@{DIGEST}")

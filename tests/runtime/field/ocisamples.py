"""Shared steps of the OCI samples tests: read every pushed artifact back over the plain
distribution API, and a proxy in front of the real registry that misbehaves on demand."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SESSION = web.AppKey("session", aiohttp.ClientSession)
_HOP = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


@dataclass
class Pulled:
    tag: str
    manifest: dict[str, Any]
    lines: list[bytes]

    @property
    def docs(self) -> list[Any]:
        return [json.loads(line) for line in self.lines]


def _get(url: str, accept: str | None = None) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        body: bytes = r.read()
        return body


def pulled(address: str, repo: str) -> list[Pulled]:
    """Every tagged artifact of ``repo``, by tag (sorted); its layer parsed line by line."""
    try:
        tags = json.loads(_get(f"http://{address}/v2/{repo}/tags/list")).get("tags") or []
    except urllib.error.HTTPError as e:
        e.close()
        if e.code == 404:  # nothing was ever pushed to the repository
            return []
        raise
    out = []
    for tag in sorted(tags):
        manifest = json.loads(_get(f"http://{address}/v2/{repo}/manifests/{tag}", MANIFEST))
        layer = _get(f"http://{address}/v2/{repo}/blobs/{manifest['layers'][0]['digest']}")
        out.append(Pulled(tag, manifest, layer.splitlines()))
    return out


@dataclass
class FlakyRegistry:
    """Forwards to ``upstream`` (``HOST:PORT``) in mode ``pass``; else misbehaves:
    ``500`` (every request), ``garbage`` (200 and random bytes to every request), ``hang``
    (answers nothing while in that mode), ``unstored`` (a manifest PUT answered 200,
    not forwarded), ``refuse_big`` (413 to a blob PUT over ``big`` bytes)."""

    upstream: str
    mode: str = "pass"
    big: int = 1 << 30
    seen: dict[str, int] = field(default_factory=dict)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.cleanup_ctx.append(self._session)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _session(self, app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            app[SESSION] = session
            yield

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        mode = self.mode
        self.seen[mode] = self.seen.get(mode, 0) + 1
        body = await request.read()
        if mode == "500":
            return web.Response(status=500, text="internal error")
        if mode == "garbage":
            return web.Response(status=200, body=os.urandom(64))
        if mode == "hang":  # silent while the test wants it (30 s at most), then a 503
            for _ in range(600):
                if self.mode != "hang":
                    break
                await asyncio.sleep(0.05)
            return web.Response(status=503)
        if mode == "unstored" and request.method == "PUT" and "/manifests/" in request.path:
            return web.Response(status=200)  # says OK, stores nothing
        if mode == "refuse_big" and request.method == "PUT" and len(body) > self.big:
            return web.Response(status=413, text="too large")
        return await self._forward(request, body)

    async def _forward(self, request: web.Request, body: bytes) -> web.Response:
        session = request.app[SESSION]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = f"http://{self.upstream}{request.path_qs}"
        async with session.request(
            request.method, url, data=body, headers=headers, allow_redirects=False
        ) as r:
            data = await r.read()
            back = {k: v for k, v in r.headers.items() if k.lower() not in _HOP}
            return web.Response(status=r.status, body=data, headers=back)

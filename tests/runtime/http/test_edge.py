"""Every route of the daemon, and every path or method no route serves, passes the edge:
the Host and cross-site checks, and V2 error bodies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.runtime.bundlekit import BundleKit
from tests.runtime.test_manage import make_settings
from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.ops.config import Settings


def test_every_route_of_the_daemon_is_behind_the_edge() -> None:
    app = build_app(Settings())
    handlers = {route.handler.__qualname__ for route in app.router.routes()}
    assert handlers == {"wrapped.<locals>.at_edge"}
    assert len(list(app.router.routes())) > 40  # the whole API, HEAD routes included


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    app = build_app(make_settings(tmp_path, BundleKit(tmp_path / "kit")))
    async with TestClient(TestServer(app)) as c:
        yield c


async def _error(client: TestClient[Any, Any], method: str, path: str, **kw: Any) -> Any:
    reply = await client.request(method, path, **kw)
    assert reply.headers["Content-Type"] == "application/json", (method, path)
    return reply.status, (await reply.json())["error"]


@pytest.mark.parametrize(
    ("method", "path", "status", "says"),
    [
        ("GET", "/nope", 404, "Not Found"),
        ("POST", "/v2/models/m/infer/extra", 404, "Not Found"),
        ("GET", "/" + "x" * 5000, 404, "Not Found"),
        ("DELETE", "/v2/health/live", 405, "Method Not Allowed"),
        ("PUT", "/metrics", 405, "Method Not Allowed"),
        ("GET", "/v2/models/m/infer", 405, "Method Not Allowed"),
        ("PATCH", "/v1/bundles", 405, "Method Not Allowed"),
    ],
)
async def test_unserved_paths_and_methods_get_v2_error_bodies(
    client: TestClient[Any, Any], method: str, path: str, status: int, says: str
) -> None:
    assert await _error(client, method, path) == (status, says)


async def test_unserved_paths_still_check_host_and_cross_site(
    client: TestClient[Any, Any],
) -> None:
    status, says = await _error(client, "GET", "/nope", headers={"Host": "evil.example"})
    assert (status, "is not served here" in says) == (403, True)
    cross = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    status, says = await _error(client, "POST", "/nope", headers=cross)
    assert (status, "cross-site" in says) == (403, True)
    status, _ = await _error(client, "DELETE", "/v2/health/live", headers={"Host": "evil.example"})
    assert status == 403  # refused before the method is looked at, as on a served route
    assert (await client.get("/v2/health/live")).status == 200  # and it still serves

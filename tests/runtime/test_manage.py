"""Management API on the composed app (real aiohttp server, registry, sandbox, ORT)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name
from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.ops.config import HttpSettings, LimitSettings, PathSettings, Settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_settings(tmp: Path, kit: BundleKit, token: str | None = TOKEN, **limits: Any) -> Settings:
    return Settings(
        paths=PathSettings(data_dir=tmp / "data", trust_file=kit.save_trust(tmp / "trust.json")),
        http=HttpSettings(management_token=token),
        limits=LimitSettings(**limits),
        profile=host_profile_name(),
        drain_s=2,
    )


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


@pytest.fixture
async def client(tmp_path: Path, kit: BundleKit) -> AsyncIterator[TestClient[Any, Any]]:
    app = build_app(make_settings(tmp_path, kit, max_bundle_bytes=1024 * 1024))
    async with TestClient(TestServer(app)) as c:
        yield c


async def _put(client: TestClient[Any, Any], path: Path, **kw: Any) -> Any:
    return await client.put("/v1/bundles", data=io.BytesIO(path.read_bytes()), **kw)


async def test_upload_serves_and_lists(client: TestClient[Any, Any], kit: BundleKit) -> None:
    r = await _put(client, kit.build("probe", 1), headers=AUTH)
    assert r.status == 201, await r.text()
    assert (await r.json())["installed"]["version"] == 1
    answer = await client.post("/v1/adapters/probe", data=b"M")
    assert await answer.read() == b"v1:2,4,6,8"
    listing = await (await client.get("/v1/bundles", headers=AUTH)).json()
    assert [(b["name"], b["version"]) for b in listing["bundles"]] == [("probe", 1)]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["missing", "wrong", "not-bearer"],
)
async def test_bad_token_is_401_and_changes_nothing(
    client: TestClient[Any, Any], kit: BundleKit, headers: dict[str, str]
) -> None:
    assert (await _put(client, kit.build("probe", 1), headers=AUTH)).status == 201
    r = await _put(client, kit.build("probe", 2), headers=headers)
    assert r.status == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    # The same error body and content type as the data plane (one error table for both).
    assert r.headers["Content-Type"] == "application/json"
    assert set(await r.json()) == {"error"}
    assert "token" in (await r.json())["error"]
    assert (await client.delete("/v1/bundles/probe", headers=headers)).status == 401
    assert (await client.get("/v1/bundles", headers=headers)).status == 401
    answer = await client.post("/v1/adapters/probe", data=b"M")
    assert await answer.read() == b"v1:2,4,6,8"


async def test_refused_bundle_is_422_and_old_keeps_serving(
    client: TestClient[Any, Any], kit: BundleKit, tmp_path: Path
) -> None:
    assert (await _put(client, kit.build("probe", 1), headers=AUTH)).status == 201
    stranger = BundleKit(tmp_path / "stranger")
    r = await _put(client, stranger.build("probe", 2), headers=AUTH)
    assert r.status == 422
    assert r.headers["Content-Type"] == "application/json"
    assert "refused" in (await r.json())["error"]
    r = await client.put("/v1/bundles", data=b"garbage", headers=AUTH)
    assert r.status == 422
    assert (await client.post("/v1/adapters/probe", data=b"M")).headers["X-Wasmgate-Version"] == "1"
    listing = await (await client.get("/v1/bundles", headers=AUTH)).json()
    assert len(listing["failures"]) >= 1


async def test_size_limit_and_empty_body(client: TestClient[Any, Any]) -> None:
    big = io.BytesIO(b"x" * (1024 * 1024 + 1))
    r = await client.put("/v1/bundles", data=big, headers=AUTH)
    assert r.status == 413
    assert "limits.max_bundle_bytes (1048576)" in (await r.json())["error"]
    r = await client.put("/v1/bundles", data=b"", headers=AUTH)
    assert r.status == 400

    async def chunks() -> AsyncIterator[bytes]:  # chunked: no Content-Length to check first
        for _ in range(20):
            yield b"y" * 65536

    r = await client.put("/v1/bundles", data=chunks(), headers=AUTH)
    assert r.status == 413
    assert "limits.max_bundle_bytes (1048576)" in (await r.json())["error"]


async def test_delete_then_unknown(client: TestClient[Any, Any], kit: BundleKit) -> None:
    assert (await _put(client, kit.build("probe", 1), headers=AUTH)).status == 201
    r = await client.delete("/v1/bundles/probe", headers=AUTH)
    assert (r.status, (await r.json())["removed"]) == (200, "probe")
    assert (await client.post("/v1/adapters/probe", data=b"M")).status == 404
    assert (await client.delete("/v1/bundles/probe", headers=AUTH)).status == 404


async def test_stage_and_promote(client: TestClient[Any, Any], kit: BundleKit) -> None:
    assert (await _put(client, kit.build("probe", 1), headers=AUTH)).status == 201
    r = await _put(client, kit.build("probe", 2), headers=AUTH, params={"stage": "30"})
    assert r.status == 201
    assert (await r.json())["percent"] == 30
    bad = await _put(client, kit.build("probe", 3), headers=AUTH, params={"stage": "0"})
    assert bad.status == 400
    r = await client.post("/v1/bundles/probe/promote", headers=AUTH)
    assert (await r.json())["promoted"]["version"] == 2
    versions = set()
    for _ in range(10):
        resp = await client.post("/v1/adapters/probe", data=b"M")
        versions.add(resp.headers["X-Wasmgate-Version"])
    assert versions == {"2"}


async def test_disabled_without_token(tmp_path: Path, kit: BundleKit) -> None:
    app = build_app(make_settings(tmp_path, kit, token=None))
    async with TestClient(TestServer(app)) as c:
        for r in (
            await c.get("/v1/bundles", headers=AUTH),
            await _put(c, kit.build("probe", 1), headers=AUTH),
        ):
            assert r.status == 403
            assert "disabled" in (await r.json())["error"]
        assert (await c.get("/v2/models/probe")).status == 404

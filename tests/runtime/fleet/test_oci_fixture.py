"""The registry fixture itself: a real distribution that stores, serves and logs blobs."""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.registry import Registry, bcrypt_hash


def _put_blob(reg: Registry, repo: str, data: bytes) -> str:
    """Monolithic upload (distribution API: POST then PUT ?digest=); returns the digest."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"http://{reg.address}/v2/{repo}/blobs/uploads/", b"", {})
    with urllib.request.urlopen(start, timeout=10) as r:
        location = r.headers["Location"]
    sep = "&" if "?" in location else "?"
    url = location if location.startswith("http") else f"http://{reg.address}{location}"
    headers = {"Content-Type": "application/octet-stream"}
    put = urllib.request.Request(f"{url}{sep}digest={digest}", data, headers, method="PUT")
    with urllib.request.urlopen(put, timeout=10):
        pass
    return digest


def test_blob_round_trip_storage_and_log(registry: Registry, tmp_path: Path) -> None:
    data = b"wasmgate bundle bytes"
    digest = _put_blob(registry, "demo/blob", data)
    with urllib.request.urlopen(
        f"http://{registry.address}/v2/demo/blob/blobs/{digest}", timeout=10
    ) as r:
        assert r.read() == data
    assert registry.blob_path(digest).read_bytes() == data  # where a test can alter it
    assert digest in registry.blob_gets()


def test_restart_keeps_port_and_content(registry: Registry) -> None:
    digest = _put_blob(registry, "demo/keep", b"{}")
    registry.stop()
    assert not registry.running
    registry.start()
    url = f"http://{registry.address}/v2/demo/keep/blobs/{digest}"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.loads(r.read()) == {}


def test_users_require_basic_auth(tmp_path: Path) -> None:
    if bcrypt_hash("x") is None:
        pytest.skip("crypt(3) makes no bcrypt hash here: no htpasswd file for the registry")
    reg = Registry(tmp_path / "reg", users={"ci": "s3cret"})
    reg.start()
    try:
        url = f"http://{reg.address}/v2/"
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(url, timeout=10)
        denied.value.close()
        assert denied.value.code == 401
        token = base64.b64encode(b"ci:s3cret").decode()
        req = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
    finally:
        reg.stop()

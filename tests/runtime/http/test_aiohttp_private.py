"""`import_lean`: aiohttp imported without its unused default contexts' CA loading, which
then verify nothing (closed), while every other context still loads the system store.

Each case runs in a fresh interpreter (this one imported aiohttp long ago); "the system
store" is a test certificate named by ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.fixtures.net import self_signed_cert, server_tls, serving

_REPORT = """
import asyncio, json, ssl, sys
{imports}
import aiohttp, aiohttp.connector as c

async def fetch(tls):
    try:
        async with aiohttp.ClientSession() as s, s.get(sys.argv[1], ssl=tls) as r:
            return (await r.read()).decode()
    except aiohttp.ClientConnectorCertificateError:
        return "refused"

explicit = ssl.create_default_context()
print(json.dumps({{
    "lean": lean,
    "again": lean_again(),
    "default_cas": c._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
    "new_context_cas": explicit.cert_store_stats()["x509_ca"],
    "patched": "set_default_verify_paths" in ssl.SSLContext.__dict__,
    "default_client": asyncio.run(fetch(True)),
    "explicit_client": asyncio.run(fetch(explicit)),
}}))
"""
_LEAN = """from wasmgate.runtime.http._aiohttp_private import import_lean
lean = import_lean()
lean_again = import_lean"""
_PLAIN = "lean = None\nlean_again = lambda: None"


@pytest.fixture
def cert(tmp_path: Path) -> Path:
    return self_signed_cert(tmp_path)[0]


@pytest.fixture
def https(tmp_path: Path, cert: Path) -> Iterator[str]:
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    with serving(app, server_tls(cert, tmp_path / "key.pem")) as url:
        yield url


def _report(imports: str, url: str, cert: Path) -> dict[str, object]:
    env = {**os.environ, "SSL_CERT_FILE": str(cert)}
    code = _REPORT.format(imports=imports)
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                         env=env, timeout=60, check=True)  # fmt: skip
    report: dict[str, object] = json.loads(out.stdout)
    return report


def test_aiohttp_defaults_skip_the_ca_loading_and_then_refuse_every_server(
    https: str, cert: Path
) -> None:
    report = _report(_LEAN, https, cert)
    assert report == {
        "lean": True,
        "again": False,  # aiohttp is imported now: nothing more to do
        "default_cas": 0,  # aiohttp's default verified context holds no root
        "new_context_cas": 1,  # a context made afterwards loads the system store
        "patched": False,  # SSLContext is as it was
        "default_client": "refused",  # closed: never an unverified connection
        "explicit_client": "hello",
    }


def test_without_the_fence_aiohttp_loads_the_system_store_twice_over(
    https: str, cert: Path
) -> None:
    """What `import_lean` saves (and why ``default_client`` above is a refusal)."""
    report = _report(_PLAIN, https, cert)
    assert (report["default_cas"], report["default_client"]) == (1, "hello")


def test_wasmgate_serve_imports_aiohttp_through_the_fence(tmp_path: Path, cert: Path) -> None:
    """``serve`` imports aiohttp lean before anything else does (here it then stops at a
    config file that does not exist, with aiohttp imported)."""
    code = (
        "import sys; from wasmgate.runtime.cli import main; "
        f"code = main(['serve', '--config', {str(tmp_path / 'missing.toml')!r}]); "
        "import aiohttp.connector as c; "
        "print(code, c._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'])"
    )
    env = {**os.environ, "SSL_CERT_FILE": str(cert)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60, check=True)  # fmt: skip
    exit_code, cas = out.stdout.split()
    assert exit_code != "0", out.stderr  # the missing config is refused
    assert cas == "0"  # plain `import aiohttp` would have loaded SSL_CERT_FILE's one root

"""Optional TLS on the HTTP listener (http.tls_cert + http.tls_key), real daemon, real openssl."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port, self_signed_cert
from tests.runtime.stack import host_profile_name


def _wait_ready(daemon: Daemon, url: str, ctx: ssl.SSLContext) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        assert daemon.proc is not None
        if daemon.proc.poll() is not None:
            raise RuntimeError(daemon.log())
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", context=ctx, timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise TimeoutError(daemon.log())


def _start_tls(tmp_path: Path, **sections: object) -> tuple[Daemon, str, ssl.SSLContext, Path]:
    """A daemon with HTTPS (plus ``sections``), ready; its HTTPS URL, client context, cert."""
    cert, key = self_signed_cert(tmp_path)
    workdir = tmp_path / "d"
    workdir.mkdir()
    config = {"http": {"tls_cert": cert, "tls_key": key}, "profile": host_profile_name()}
    daemon = Daemon(workdir, {**config, **sections})
    https = daemon.url.replace("http://", "https://")
    ctx = ssl.create_default_context(cafile=str(cert))
    cmd = [sys.executable, "-m", "wasmgate", "serve", "--config", str(daemon.config_path)]
    with daemon.log_path.open("ab") as log:
        daemon.proc = subprocess.Popen(cmd, stderr=log)
    try:
        _wait_ready(daemon, https, ctx)
    except BaseException:
        daemon.kill()
        raise
    return daemon, https, ctx, cert


def test_https_listener(tmp_path: Path) -> None:
    daemon, https, ctx, _ = _start_tls(tmp_path)
    try:
        with urllib.request.urlopen(f"{https}/v2/health/live", context=ctx, timeout=10) as r:
            assert r.status == 200
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"{daemon.url}/v2/health/live", timeout=5)  # plain HTTP
        assert daemon.stop() == 0
    finally:
        daemon.kill()


def test_grpc_uses_the_http_tls_keys(tmp_path: Path) -> None:
    port = free_port()
    daemon, _, _, cert = _start_tls(tmp_path, grpc={"port": port})
    url = f"127.0.0.1:{port}"
    try:
        secure = triton.InferenceServerClient(url, ssl=True, root_certificates=str(cert))
        assert secure.is_server_live()
        assert secure.get_server_metadata().name == "wasmgate"
        secure.close()
        plain = triton.InferenceServerClient(url)
        with pytest.raises(InferenceServerException) as err:
            plain.is_server_live(client_timeout=5)
        assert err.value.status() == "StatusCode.UNAVAILABLE"
        plain.close()
        assert daemon.stop() == 0
    finally:
        daemon.kill()

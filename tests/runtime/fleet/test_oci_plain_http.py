"""TLS asked of a plain-HTTP registry (a lab's ``docker-registry``) says what is wrong and
names the fix: ``--insecure`` / ``registry.insecure``; a real certificate problem does not.

A real docker-registry on plain HTTP, and one on HTTPS with a self-signed certificate.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.daemon import write_config
from tests.fixtures.net import self_signed_cert
from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from wasmgate.runtime.cli import main
from wasmgate.runtime.cli._registry_probe import probe_registry
from wasmgate.runtime.ops.config import RegistrySettings

PLAIN_HTTP = "the registry seems to speak plain HTTP, not HTTPS"
FIX = "give --insecure (config: registry.insecure = true)"


def _fails(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    assert main([str(a) for a in argv]) == 1, argv
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def _tags(registry: Registry, repo: str) -> int:
    """HTTP status of the tag list: 404 while nothing was ever pushed to ``repo``."""
    try:
        with urllib.request.urlopen(f"http://{registry.address}/v2/{repo}/tags/list") as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.close()
        return e.code


def test_plain_http_registry_without_insecure_names_the_fix(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = BundleKit(tmp_path / "kit").build("probe", 1)
    ref = f"{registry.address}/lab/probe:1"
    for argv in (
        ("bundle", "push", bundle, ref),
        ("bundle", "pull", ref, "--out", tmp_path / "x.wgb"),
    ):
        err = _fails(capsys, *argv)
        assert PLAIN_HTTP in err, err
        assert FIX in err, err
        assert "WRONG_VERSION_NUMBER" not in err
    assert _tags(registry, "lab/probe") == 404  # nothing was pushed
    assert not (tmp_path / "x.wgb").exists()
    found = probe_registry(RegistrySettings(host=registry.address))
    assert found.level == "error", found
    assert PLAIN_HTTP in found.message, found
    assert "registry.insecure = true" in (found.fix or ""), found
    # the fix works as said
    assert main(["bundle", "push", str(bundle), ref, "--insecure"]) == 0
    assert _tags(registry, "lab/probe") == 200


def test_a_real_tls_failure_is_not_called_plain_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pki").mkdir()
    cert, key = self_signed_cert(tmp_path / "pki")
    reg = Registry(tmp_path / "tls", tls=(cert, key))
    reg.start()
    try:
        system_cas = write_config(tmp_path / "c.toml", {"registry": {"insecure": False}})
        ref = f"{reg.address}/lab/probe:1"
        err = _fails(capsys, "bundle", "pull", ref, "--out", tmp_path / "x", "--config", system_cas)
        assert "TLS verification failed (registry.ca?)" in err
        assert "plain HTTP" not in err
    finally:
        reg.stop()

"""Registry credentials (htpasswd basic auth) for push, pull and `wasmgate doctor`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import write_config
from tests.fixtures.net import free_port, self_signed_cert
from tests.fixtures.registry import Registry, bcrypt_hash
from tests.runtime.bundlekit import BundleKit
from wasmgate.runtime.cli import main
from wasmgate.runtime.cli._registry_probe import is_loopback_host, probe_registry
from wasmgate.runtime.cli.doctor import run_checks
from wasmgate.runtime.ops.config import RegistrySettings
from wasmgate.typed import replace

USER, PASSWORD = "fleet-ci", "s3cret-pw"


@pytest.fixture
def private(tmp_path: Path) -> Iterator[Registry]:
    """A registry that demands basic auth (distribution's htpasswd, bcrypt only)."""
    if bcrypt_hash("probe") is None:
        pytest.skip("crypt(3) cannot make bcrypt hashes here, so no htpasswd for the registry")
    reg = Registry(tmp_path / "private", users={USER: PASSWORD})
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()


def config(tmp_path: Path, **registry: object) -> Path:
    path = tmp_path / f"wasmgate-{len(list(tmp_path.glob('wasmgate-*')))}.toml"
    return write_config(path, {"registry": {"insecure": True, **registry}})


def round_trip(reg: Registry, tmp_path: Path, conf: Path) -> tuple[Path, str]:
    """Push a signed bundle and pull it back with ``conf``; (bundle, tag ref)."""
    bundle = BundleKit(tmp_path / "kit").build("probe", 1)
    ref, out = f"{reg.address}/fleet/probe:v1", tmp_path / "pulled.wgb"
    assert main(["bundle", "push", str(bundle), ref, "--config", str(conf)]) == 0
    assert main(["bundle", "pull", ref, "--out", str(out), "--config", str(conf)]) == 0
    assert out.read_bytes() == bundle.read_bytes()
    return bundle, ref


def fails(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    """Run the CLI, which must exit 1; its stderr."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 1, err
    return err


def test_push_and_pull_need_the_configured_credentials(
    private: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, ref = round_trip(private, tmp_path, config(tmp_path, username=USER, password=PASSWORD))
    cases = {
        "anonymous": (config(tmp_path), "wants credentials"),
        "wrong password": (
            config(tmp_path, username=USER, password="nope"),
            "refused registry.username",
        ),
        # credentials belong to another host: never sent to this one
        "other host": (
            config(tmp_path, username=USER, password=PASSWORD, host="127.0.0.1:1"),
            "wants credentials",
        ),
    }
    for case, (conf, reason) in cases.items():
        err = fails(capsys, "bundle", "pull", ref, "--out", tmp_path / "x.wgb", "--config", conf)
        assert reason in err, (case, err)
        err = fails(capsys, "bundle", "push", bundle, f"{private.address}/x:v1", "--config", conf)
        assert reason in err, (case, err)
    assert not (tmp_path / "x.wgb").exists()


def test_doctor_checks_the_configured_registry(private: Registry, tmp_path: Path) -> None:
    base = RegistrySettings(host=private.address, insecure=True)
    ok = probe_registry(replace(base, username=USER, password=PASSWORD))
    assert (ok.level, f"as {USER}" in ok.message) == ("ok", True), ok
    refused = probe_registry(replace(base, username=USER, password="nope"))
    assert (refused.level, "refused" in refused.message) == ("error", True), refused
    assert "registry.username/password" in refused.fix
    anonymous = probe_registry(base)
    assert (anonymous.level, "wants credentials" in anonymous.message) == ("error", True)
    down = probe_registry(RegistrySettings(host=f"127.0.0.1:{free_port()}", insecure=True))
    assert (down.level, "cannot reach" in down.message) == ("error", True), down
    no_ca = probe_registry(replace(base, ca=tmp_path / "missing.pem"))
    assert (no_ca.level, "registry.ca" in no_ca.message) == ("error", True)
    # wired into the doctor, read from the config file
    conf = write_config(
        tmp_path / "d.toml",
        {
            "paths": {"data_dir": tmp_path / "data"},
            "registry": {"host": private.address, "insecure": True, "username": USER,
                         "password": PASSWORD},
        },
    )  # fmt: skip
    found = {f.check: f for f in run_checks(conf)}
    assert found["registry"].level == "ok", found["registry"]


def test_plain_http_is_only_quiet_on_loopback() -> None:
    loopback = ["127.0.0.1:5000", "localhost:5000", "[::1]:5000", "127.9.9.9", "localhost"]
    beyond = ["10.0.0.1:5000", "registry.example.com", "[2001:db8::1]:443", "localhost.evil:1"]
    assert all(is_loopback_host(h) for h in loopback)
    assert not any(is_loopback_host(h) for h in beyond)


def test_https_registry_verified_with_the_configured_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pki").mkdir()
    cert, key = self_signed_cert(tmp_path / "pki")
    reg = Registry(tmp_path / "tls", tls=(cert, key))
    reg.start()
    try:
        bundle, ref = round_trip(reg, tmp_path, config(tmp_path, insecure=False, ca=cert))
        system_cas = config(tmp_path, insecure=False)
        x = tmp_path / "x.wgb"
        err = fails(capsys, "bundle", "pull", ref, "--out", x, "--config", system_cas)
        assert "TLS verification failed" in err
        err = fails(capsys, "bundle", "push", bundle, ref, "--config", system_cas)
        assert "TLS verification failed" in err
        https = RegistrySettings(host=reg.address, ca=cert)
        assert probe_registry(https).level == "ok"
        unverified = probe_registry(RegistrySettings(host=reg.address))
        assert (unverified.level, "TLS" in unverified.message) == ("error", True), unverified
    finally:
        reg.stop()

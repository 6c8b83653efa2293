"""Registry credentials (htpasswd basic auth) for push, pull and `wasmgate doctor`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import write_config
from tests.fixtures.net import free_port
from tests.fixtures.registry import Registry, bcrypt_hash
from tests.runtime.bundlekit import BundleKit
from wasmgate.runtime.cli import main
from wasmgate.runtime.cli._registry_probe import is_loopback_host, probe_registry
from wasmgate.runtime.cli.doctor import run_checks
from wasmgate.runtime.ops.config import RegistrySettings

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


def test_push_and_pull_need_the_configured_credentials(
    private: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = BundleKit(tmp_path / "kit").build("probe", 1)
    ref, out = f"{private.address}/fleet/probe:v1", tmp_path / "pulled.wgb"
    good = config(tmp_path, username=USER, password=PASSWORD)
    assert main(["bundle", "push", str(bundle), ref, "--config", str(good)]) == 0
    assert main(["bundle", "pull", ref, "--out", str(out), "--config", str(good)]) == 0
    assert out.read_bytes() == bundle.read_bytes()
    capsys.readouterr()
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
        code = main(
            ["bundle", "pull", ref, "--out", str(tmp_path / "x.wgb"), "--config", str(conf)]
        )
        err = capsys.readouterr().err
        assert (code, reason in err) == (1, True), (case, err)
        code = main(
            ["bundle", "push", str(bundle), f"{private.address}/fleet/x:v1", "--config", str(conf)]
        )
        err = capsys.readouterr().err
        assert (code, reason in err) == (1, True), (case, err)
    assert not (tmp_path / "x.wgb").exists()


def test_doctor_checks_the_configured_registry(private: Registry, tmp_path: Path) -> None:
    base = RegistrySettings(host=private.address, insecure=True)
    ok = probe_registry(base.model_copy(update={"username": USER, "password": PASSWORD}))
    assert (ok.level, f"as {USER}" in ok.message) == ("ok", True), ok
    refused = probe_registry(base.model_copy(update={"username": USER, "password": "nope"}))
    assert (refused.level, "refused" in refused.message) == ("error", True), refused
    assert "registry.username/password" in refused.fix
    anonymous = probe_registry(base)
    assert (anonymous.level, "wants credentials" in anonymous.message) == ("error", True)
    down = probe_registry(RegistrySettings(host=f"127.0.0.1:{free_port()}", insecure=True))
    assert (down.level, "cannot reach" in down.message) == ("error", True), down
    no_ca = probe_registry(base.model_copy(update={"ca": tmp_path / "missing.pem"}))
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

"""The ``[registry]`` section: strict keys, environment overrides, bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.daemon import write_config
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import load_settings


def test_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = write_config(
        tmp_path / "c.toml",
        {"registry": {"host": "reg.example.com:5000", "username": "gw", "retries": 2}},
    )
    # a secret kept out of the file: the unit's environment wins over it
    monkeypatch.setenv("WASMGATE_REGISTRY__PASSWORD", "from-env")
    reg = load_settings(conf).registry
    assert (reg.host, reg.username, reg.password, reg.retries) == (
        "reg.example.com:5000", "gw", "from-env", 2
    )  # fmt: skip
    assert (reg.insecure, reg.ca, reg.max_bundle_bytes) == (False, None, 512 * 1024 * 1024)


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"usernme": "gw"}, "registry.usernme: unknown key"),
        ({"retries": -1}, "registry.retries"),
        ({"retries": 1000}, "registry.retries"),
        ({"max_bundle_bytes": 0}, "registry.max_bundle_bytes"),
        ({"backoff_s": 0}, "registry.backoff_s"),
        ({"timeout_s": 1e9}, "registry.timeout_s"),
        ({"insecure": "maybe"}, "registry.insecure"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, table: dict[str, object], problem: str) -> None:
    conf = write_config(tmp_path / "c.toml", {"registry": table})
    with pytest.raises(ConfigError, match=problem):
        load_settings(conf)

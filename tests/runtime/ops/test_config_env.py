"""The environment's settings (`config_env`): the rules pydantic-settings applied, kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import Settings, load_settings
from wasmgate.runtime.ops.config_env import env_data, merged


def test_plain_values_stay_strings_and_containers_are_json() -> None:
    env = {
        "WASMGATE_HTTP__PORT": "9000",
        "WASMGATE_HTTP__ALLOWED_HOSTS": '["a.local", "b.local"]',
        "WASMGATE_MQTT__HOST": "[not json, a host name]",
        "WASMGATE_PROFILE": "generic-x86_64",
    }
    assert env_data(Settings, env) == {
        "http": {"port": "9000", "allowed_hosts": ["a.local", "b.local"]},
        "mqtt": {"host": "[not json, a host name]"},
        "profile": "generic-x86_64",
    }


def test_names_are_case_insensitive_and_other_tools_variables_are_ignored() -> None:
    env = {"wasmgate_Http__Port": "1", "WASMGATE_BUILD_CACHE": "/tmp/x", "PATH": "/bin"}
    assert env_data(Settings, env) == {"http": {"port": "1"}}


def test_deeper_levels_dicts_and_a_whole_section() -> None:
    env = {
        "WASMGATE_STORE__DEFAULTS__MAX_BYTES": "7",
        "WASMGATE_STORE__STREAMS__ANSWERS__MAX_AGE_S": "9",
        "WASMGATE_VARIABLES__DIGITS__THRESHOLD": "0.5",  # a dict's value: the string
        "WASMGATE_VARIABLES__DIGITS": '{"other": 1}',  # dict-typed: JSON
        "WASMGATE_LOG": '{"level": "DEBUG"}',
        "WASMGATE_LOG__FORMAT": "json",  # merged into the section's JSON
    }
    data = env_data(Settings, env)
    assert data["store"] == {
        "defaults": {"max_bytes": "7"},
        "streams": {"answers": {"max_age_s": "9"}},
    }
    assert data["variables"] == {"digits": {"other": 1, "threshold": "0.5"}}
    assert data["log"] == {"level": "DEBUG", "format": "json"}


def test_bad_json_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="WASMGATE_HTTP__ALLOWED_HOSTS: not valid JSON"):
        env_data(Settings, {"WASMGATE_HTTP__ALLOWED_HOSTS": "a.local"})


def test_merge_is_deep_and_the_environment_wins() -> None:
    base = {"http": {"port": 1, "host": "h"}, "mqtt": {"host": "m"}, "drain_s": 3}
    over = {"http": {"port": "2"}, "drain_s": "4"}
    assert merged(base, over) == {
        "http": {"port": "2", "host": "h"},
        "mqtt": {"host": "m"},
        "drain_s": "4",
    }
    assert base["http"] == {"port": 1, "host": "h"}  # not changed in place


def test_settings_built_directly_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Settings(...)` itself applies the environment over its arguments, as BaseSettings
    did: `wasmgate bundle` reads ``Settings().paths`` for the trust file."""
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "9003")
    monkeypatch.setenv("WASMGATE_PATHS__TRUST_FILE", "/etc/x/trust.json")
    settings = Settings(http={"port": 1, "host": "127.0.0.9"})  # type: ignore[arg-type]
    assert (settings.http.port, settings.http.host) == (9003, "127.0.0.9")
    assert settings.paths.resolved_trust_file() == Path("/etc/x/trust.json")


def test_env_lists_and_types_reach_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[http]\nallowed_hosts = ["file.local"]\n')
    monkeypatch.setenv("WASMGATE_HTTP__ALLOWED_HOSTS", '["env.local"]')
    monkeypatch.setenv("WASMGATE_DRAIN_S", "2.5")
    settings = load_settings(cfg)
    assert settings.http.allowed_hosts == ("env.local",)
    assert settings.drain_s == 2.5

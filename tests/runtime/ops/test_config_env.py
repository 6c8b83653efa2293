"""The environment's settings (`config_env`): the rules pydantic-settings applied, kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import Settings, load_settings, settings_from
from wasmgate.runtime.ops.config_env import env_data, merged


def test_plain_values_are_read_as_their_field_type_and_containers_are_json() -> None:
    env = {
        "WASMGATE_HTTP__PORT": "9000",
        "WASMGATE_HTTP__ALLOWED_HOSTS": '["a.local", "b.local"]',
        "WASMGATE_MQTT__HOST": "[not json, a host name]",
        "WASMGATE_PROFILE": "generic-x86_64",
    }
    assert env_data(Settings, env) == {
        "http": {"port": 9000, "allowed_hosts": ["a.local", "b.local"]},
        "mqtt": {"host": "[not json, a host name]"},
        "profile": "generic-x86_64",
    }


def test_names_are_case_insensitive_and_other_tools_variables_are_ignored() -> None:
    env = {"wasmgate_Http__Port": "1", "WASMGATE_BUILD_CACHE": "/tmp/x", "PATH": "/bin"}
    assert env_data(Settings, env) == {"http": {"port": 1}}


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
        "defaults": {"max_bytes": 7},
        "streams": {"answers": {"max_age_s": 9}},
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


def test_settings_from_data_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`settings_from` applies the environment over the values given, as BaseSettings did
    for `Settings(...)`: `wasmgate bundle` reads ``settings_from({}).paths`` for the trust
    file."""
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "9003")
    monkeypatch.setenv("WASMGATE_PATHS__TRUST_FILE", "/etc/x/trust.json")
    settings = settings_from({"http": {"port": 1, "host": "127.0.0.9"}})
    assert (settings.http.port, settings.http.host) == (9003, "127.0.0.9")
    assert settings.paths.resolved_trust_file() == Path("/etc/x/trust.json")
    with pytest.raises(ConfigError, match=r"^configuration: http\.hots: unknown key$"):
        settings_from({"http": {"hots": "x"}})


def test_the_spellings_pydantic_read_become_values_and_others_stay_text() -> None:
    """Every text that spells a value of its field's type becomes that value (the settings
    are then checked strictly, as the file's typed values are); other text stays text."""
    env = {
        "WASMGATE_HTTP__PORT": " 9000 ",  # pydantic stripped, msgspec does not
        "WASMGATE_LIMITS__FUEL": "1_000",  # an int or None
        "WASMGATE_CLOUD__TIMEOUT_S": "+2.5",
        "WASMGATE_CLOUD__DEFER": "No",
        "WASMGATE_SAMPLES__MQTT": "on",  # a bool or unset
        "WASMGATE_HTTP__MAX_BODY_BYTES": "12",
        "WASMGATE_REGISTRY__INSECURE": "TRUE",
        "WASMGATE_MQTT__PORT": "abc",  # nobody reads it: the model refuses the text
        "WASMGATE_MQTT__HOST": "1_000",  # a host name, not a number
        "WASMGATE_PATHS__DATA_DIR": "yes",  # a path, not a boolean
    }
    assert env_data(Settings, env) == {
        "http": {"port": 9000, "max_body_bytes": 12},
        "limits": {"fuel": 1000},
        "cloud": {"timeout_s": 2.5, "defer": False},
        "samples": {"mqtt": True},
        "registry": {"insecure": True},
        "mqtt": {"port": "abc", "host": "1_000"},
        "paths": {"data_dir": "yes"},
    }


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

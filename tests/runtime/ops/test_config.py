"""Config: defaults, TOML, environment overrides, one-line errors naming file and key."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import Settings, load_settings
from wasmgate.typed import replace


def test_defaults_without_any_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/tmp/xdg-test")
    settings = load_settings(None)
    assert (settings.http.host, settings.http.port) == ("127.0.0.1", 8080)
    assert settings.mqtt.host is None
    expected = Path("/var/lib/wasmgate") if os.geteuid() == 0 else Path("/tmp/xdg-test/wasmgate")
    assert settings.paths.data_dir == expected
    assert settings.paths.resolved("bundle_dir") == expected / "bundles"


def test_toml_file_and_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[http]\nport = 9001\nhost = "127.0.0.2"\n[mqtt]\nhost = "broker"\n')
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "9002")
    settings = load_settings(cfg)
    assert settings.http.port == 9002
    assert settings.http.host == "127.0.0.2"
    assert settings.mqtt.host == "broker"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[http]\nprot = 1\n", "http.prot: unknown key"),
        ("[http]\nport = 'abc'\n", "http.port: Expected `int`, got `str`"),
        ("nonsense = 1\n", "nonsense: unknown key"),
        # An unknown key deeper down, in a section's table and in a table of tables (whose
        # keys msgspec does not name: the loader finds them again).
        ("[store.defaults]\nmax_bytez = 1\n", "store.defaults.max_bytez: unknown key"),
        (
            "[store.streams.answers]\nmax_bytes = 1\n[store.streams.events]\nmax_bytez = 1\n",
            "store.streams.events.max_bytez: unknown key",
        ),
        # Wrong types: a table for a number, a number for a table, a number for a path.
        ("[http]\nport = { a = 1 }\n", "http.port: Expected `int`, got `object`"),
        ("http = 3\n", "http: Expected `object`, got `int`"),
        ("[paths]\ndata_dir = 3\n", "paths.data_dir: Expected `str`, got `int`"),
        # TOML values are typed: text that spells a number or a boolean is still text.
        ('[http]\nport = "18082"\n', "http.port: Expected `int`, got `str`"),
        ('drain_s = "3"\n', "drain_s: Expected `float`, got `str`"),
        ('[registry]\ninsecure = "true"\n', "registry.insecure: Expected `bool`, got `str`"),
        ("[registry]\ninsecure = 1\n", "registry.insecure: Expected `bool`, got `int`"),
        ("[http]\nmax_body_bytes = 1.5\n", "http.max_body_bytes: Expected `int`, got `float`"),
        ('[store.streams.answers]\nmax_bytes = "9"\n', "store.streams.answers.max_bytes: Exp"),
        ("[mqtt]\nprotocol = 5\n", "mqtt.protocol: Expected `str`, got `int`"),
        ("[variables.digits]\nx = 2026-01-01\n", "variables.digits.x: Expected"),
        # Out of range, also inside a table of tables.
        ("[http]\nport = 65536\n", "http.port: Expected `int` <= 65535"),
        ("[store.streams.answers]\nmax_bytes = 0\n", "store.streams.answers.max_bytes: Expected"),
        ("[limits]\nspare_instances = 65\n", "limits.spare_instances: Expected `int` <= 64"),
        # Patterns hold to the end: Python's `$` would take a final newline.
        ('[fleet]\ngroups = ["ok", "two\\n"]\n', "fleet.groups.1: Expected `str` matching"),
        ('[telemetry]\notlp_endpoint = "http://x\\n"\n', "telemetry.otlp_endpoint:"),
        ('[samples]\nhttp_path = "/v1/s\\n"\n', "samples.http_path:"),
        ("[http\n", "not valid TOML"),
    ],
)
def test_bad_file_errors_name_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    message = str(exc.value)
    assert message.startswith(str(cfg))
    assert needle in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        (
            "WASMGATE_HTTP__PROT",
            "1",
            "environment variable WASMGATE_HTTP__PROT: http.prot: unknown key",
        ),
        (
            "WASMGATE_HTTP__PORT",
            "abc",
            "environment variable WASMGATE_HTTP__PORT: http.port: 'abc' is not an integer",
        ),
        ("WASMGATE_HTTP__PORT", "1.5", "WASMGATE_HTTP__PORT: http.port: '1.5' is not an integer"),
        (
            "WASMGATE_HTPP__PORT",
            "9000",
            "environment variable WASMGATE_HTPP__PORT: unknown section 'htpp'",
        ),
        ("wasmgate_mqtt__qos", "7", "environment variable wasmgate_mqtt__qos: mqtt.qos:"),
        (
            "WASMGATE_HTTP__PORT",
            "65536",
            "environment variable WASMGATE_HTTP__PORT: http.port: Expected `int` <= 65535",
        ),
        (
            "WASMGATE_STORE__STREAMS__ANSWERS__MAX_BYTES",
            "0",
            "WASMGATE_STORE__STREAMS__ANSWERS__MAX_BYTES: store.streams.answers.max_bytes:",
        ),
        (
            "WASMGATE_STORE__DEFAULTS__MAX_BYTEZ",
            "1",
            "variable WASMGATE_STORE__DEFAULTS__MAX_BYTEZ: store.defaults.max_bytez: unknown key",
        ),
        (
            "WASMGATE_SAMPLES__OCI_REPOSITORY",
            "Lab/Samples",
            "WASMGATE_SAMPLES__OCI_REPOSITORY: samples.oci_repository: 'Lab/Samples' is not",
        ),
        (
            "WASMGATE_CLOUD__DEFER",
            "maybe",
            "WASMGATE_CLOUD__DEFER: cloud.defer: 'maybe' is not a boolean (true or false)",
        ),
        ("WASMGATE_HTTP__PORT", "", "environment variable WASMGATE_HTTP__PORT: http.port:"),
    ],
)
def test_env_errors_name_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str, needle: str
) -> None:
    cfg = tmp_path / "typo5.toml"
    cfg.write_text("[http]\nport = 9001\n")
    monkeypatch.setenv(var, value)
    for path in (cfg, None):  # with a file and without one
        with pytest.raises(ConfigError) as exc:
            load_settings(path)
        assert needle in str(exc.value)
        assert "typo5.toml" not in str(exc.value)


def test_file_errors_still_blame_the_file_with_env_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[http]\nprot = 1\n")
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "9002")  # valid: not the one to blame
    monkeypatch.setenv("WASMGATE_BUILD_CACHE", "/tmp/x")  # another tool's variable
    with pytest.raises(ConfigError, match=r"c\.toml: http\.prot: unknown key"):
        load_settings(cfg)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.toml")


def _undocumented(tree: ast.Module, models: set[str]) -> list[str]:
    """Fields of the named classes whose assignment is not followed by a docstring."""
    missing = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in models):
        body = cls.body
        for i, stmt in enumerate(body):
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            after = body[i + 1] if i + 1 < len(body) else None
            documented = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
                and after.value.value.strip() != ""
            )
            if not documented and not stmt.target.id.startswith("_"):
                missing.append(f"{cls.name}.{stmt.target.id}")
    return missing


def _sections(kind: type[msgspec.Struct]) -> set[type[msgspec.Struct]]:
    """``kind`` and every Struct class its fields hold, directly or deeper."""
    found = {kind}
    for field in msgspec.structs.fields(kind):
        if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
            found |= _sections(field.type)
    return found


def test_every_field_is_documented() -> None:
    """Every setting has its docstring in the source of its section's module (config.py,
    config_network.py, config_local.py): the daemon never reads them, msgspec neither."""
    wanted = _sections(Settings)
    assert len(wanted) > 10  # every section is walked
    missing, seen = [], set()
    for path in {sys.modules[kind.__module__].__file__ for kind in wanted}:
        tree = ast.parse(Path(str(path)).read_text())
        seen |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        missing += _undocumented(tree, {kind.__name__ for kind in wanted})
    assert {kind.__name__ for kind in wanted} <= seen  # no section escaped the check
    assert missing == []
    # The check itself: a field without a docstring is found.
    bare = ast.parse('class HttpSettings:\n    port: int = 1\n    host: str = ""\n    """x"""\n')
    assert _undocumented(bare, {"HttpSettings"}) == ["HttpSettings.port"]


def test_serve_with_bad_config_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[http]\nport = 'x'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "wasmgate", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(cfg) in lines[0]
    assert "http.port" in lines[0]


def test_spare_instances_reach_the_sandbox_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """``limits.spare_instances`` is the engine's ceiling (0 turns spares off); out of range
    is refused like any other field."""
    from wasmgate.runtime.compose.app import ceilings  # noqa: PLC0415 - the daemon's composition root

    monkeypatch.setenv("WASMGATE_LIMITS__SPARE_INSTANCES", "0")
    assert ceilings(load_settings(None)).spare_instances == 0
    monkeypatch.delenv("WASMGATE_LIMITS__SPARE_INSTANCES")
    assert ceilings(load_settings(None)).spare_instances == 2
    monkeypatch.setenv("WASMGATE_LIMITS__SPARE_INSTANCES", "-1")
    with pytest.raises(ConfigError, match="WASMGATE_LIMITS__SPARE_INSTANCES"):
        load_settings(None)


def test_the_environment_overrides_a_typed_file_with_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable's text is read as its field's type (``port`` from ``"18082"``), while the
    same text in the file is refused; JSON from a variable keeps JSON's types."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[http]\nport = 9001\n[registry]\ninsecure = false\n")
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "18082")
    monkeypatch.setenv("WASMGATE_REGISTRY__INSECURE", "true")
    monkeypatch.setenv("WASMGATE_DRAIN_S", "3")
    settings = load_settings(cfg)
    assert (settings.http.port, settings.registry.insecure, settings.drain_s) == (18082, True, 3.0)
    monkeypatch.setenv("WASMGATE_FLEET__GROUPS", "[1]")
    with pytest.raises(ConfigError, match=r"^environment variable WASMGATE_FLEET__GROUPS: fleet"):
        load_settings(cfg)


def test_environment_numbers_and_booleans_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spellings pydantic took from a variable still work (msgspec alone refuses them),
    and what they spell is checked like any value."""
    monkeypatch.setenv("WASMGATE_HTTP__PORT", " 9000")
    monkeypatch.setenv("WASMGATE_LIMITS__MAX_BUNDLE_BYTES", "1_000_000")
    monkeypatch.setenv("WASMGATE_CLOUD__DEFER", "off")
    monkeypatch.setenv("WASMGATE_REGISTRY__INSECURE", "Yes")
    monkeypatch.setenv("WASMGATE_MQTT__HOST", "1_000")  # text stays text
    settings = load_settings(None)
    assert (settings.http.port, settings.limits.max_bundle_bytes) == (9000, 1_000_000)
    assert (settings.cloud.defer, settings.registry.insecure) == (False, True)
    assert settings.mqtt.host == "1_000"
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "+70_000")
    with pytest.raises(
        ConfigError, match=r"WASMGATE_HTTP__PORT: http\.port: Expected `int` <= 65535"
    ):
        load_settings(None)


def test_a_section_built_directly_is_plain_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Settings(...)` takes its values as given (no environment, no bounds): the loaders
    add both. So a ``--port`` put over loaded settings with `replace` stays, whatever the
    environment says, and a reload's ``replace`` does not re-read it either."""
    monkeypatch.setenv("WASMGATE_HTTP__PORT", "9003")
    assert Settings().http.port == 8080
    loaded = load_settings(None)
    assert loaded.http.port == 9003
    assert replace(loaded, http=replace(loaded.http, port=1)).http.port == 1

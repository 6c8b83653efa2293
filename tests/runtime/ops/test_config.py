"""Config: defaults, TOML, environment overrides, one-line errors naming file and key."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops import config as config_module
from wasmgate.runtime.ops.config import Settings, load_settings


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
        ("[http]\nport = 'abc'\n", "http.port: Input should be a valid integer"),
        ("nonsense = 1\n", "nonsense: unknown key"),
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
        ("WASMGATE_HTTP__PORT", "abc", "environment variable WASMGATE_HTTP__PORT: http.port:"),
        (
            "WASMGATE_HTPP__PORT",
            "9000",
            "environment variable WASMGATE_HTPP__PORT: unknown section 'htpp'",
        ),
        ("wasmgate_mqtt__qos", "7", "environment variable wasmgate_mqtt__qos: mqtt.qos:"),
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


def test_every_field_is_documented() -> None:
    """Every setting has its docstring in runtime/ops/config.py (read from the source: the
    daemon does not ask pydantic to parse them, see ``_Section``)."""

    def models(model: type[Any]) -> set[str]:
        names = {model.__name__}
        for field in model.model_fields.values():
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                names |= models(annotation)
        return names

    tree = ast.parse(Path(config_module.__file__).read_text())
    wanted = models(Settings)
    assert len(wanted) > 10  # every section is walked
    assert _undocumented(tree, wanted) == []
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
    from wasmgate.runtime.app import ceilings  # noqa: PLC0415 - the daemon's composition root

    monkeypatch.setenv("WASMGATE_LIMITS__SPARE_INSTANCES", "0")
    assert ceilings(load_settings(None)).spare_instances == 0
    monkeypatch.delenv("WASMGATE_LIMITS__SPARE_INSTANCES")
    assert ceilings(load_settings(None)).spare_instances == 2
    monkeypatch.setenv("WASMGATE_LIMITS__SPARE_INSTANCES", "-1")
    with pytest.raises(ConfigError, match="WASMGATE_LIMITS__SPARE_INSTANCES"):
        load_settings(None)

"""The running daemon's own paths, for `wasmgate doctor`.

Doctor must check the files the daemon really uses: a ``serve --demo`` daemon serves from
``<data_dir>/demo``, and a unit's ``--config`` and ``Environment=`` may name other paths than
the shell doctor runs in. The daemon says which in ``/v1/status`` (``components.paths``);
asked on the configured HTTP port over loopback, with a short timeout. When none answers
and doctor was given no ``--config``, the installed unit's ``ExecStart --config`` and its
``Environment=WASMGATE_PATHS__*`` are what the service would use, so those are checked.
"""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.request
from pathlib import Path

from wasmgate.runtime.cli._checks import UNIT_PATHS, Finding
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import Settings, load_settings
from wasmgate.runtime.ops.config_local import PathSettings
from wasmgate.typed import replace

TIMEOUT_S = 2.0
_KEYS = ("data_dir", "bundle_dir", "state_dir", "cache_dir", "trust_file")


def status_url(settings: Settings) -> str:
    host = settings.http.host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.http.port}/v1/status"


def running_paths(
    settings: Settings, given: bool, unit_path: Path | None = None
) -> tuple[Settings, Finding]:
    """``settings`` with the running daemon's paths, and a finding saying whose were checked."""
    url = status_url(settings)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:  # noqa: S310 - http only
            doc = json.loads(answer.read())
        paths = doc["components"]["paths"]
        found = {k: Path(str(paths[k])) for k in _KEYS}
    except (OSError, ValueError, KeyError, TypeError) as e:
        reason = getattr(e, "reason", e)
        unit = unit_path or next((p for p in UNIT_PATHS if p.is_file()), None)
        if not given and unit is not None and unit.is_file():
            return _unit_paths(settings, unit, f"none answers at {url} ({reason})")
        return settings, Finding(
            "daemon",
            "skip",
            f"none answers at {url} ({reason}): checked the configured paths",
        )
    checked = replace(settings, paths=PathSettings(**found))
    return checked, Finding(
        "daemon",
        "ok",
        f"running at {url}: checked its paths (trust file {found['trust_file']}, "
        f"bundles {found['bundle_dir']})",
    )


def _unit_paths(settings: Settings, unit: Path, why: str) -> tuple[Settings, Finding]:
    """The paths the installed unit gives the service: its ``--config`` (when it exists),
    then its ``Environment=WASMGATE_PATHS__*`` on top, as the service reads them."""
    config, env = _unit_service(unit.read_text(encoding="utf-8"))
    base = settings
    if config is not None and Path(config).is_file():
        try:
            base = load_settings(Path(config))
        except ConfigError:
            base = settings  # the unit check reports the file; paths stay this shell's
    fields = set(_KEYS)
    over = {k[16:].lower(): Path(v) for k, v in env.items() if k.startswith("WASMGATE_PATHS__")}
    over = {k: v for k, v in over.items() if k in fields}
    checked = replace(base, paths=replace(base.paths, **over))
    trust = checked.paths.resolved_trust_file()
    return checked, Finding(
        "daemon",
        "ok",
        f"{why}: checked the installed unit's paths ({unit}: trust file {trust}, "
        f"bundles {checked.paths.resolved('bundle_dir')})",
    )


def _unit_service(text: str) -> tuple[str | None, dict[str, str]]:
    """The unit's ``ExecStart --config`` and its ``Environment=`` assignments."""
    config: str | None = None
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line.removeprefix("ExecStart="))
            config = words[words.index("--config") + 1] if "--config" in words[:-1] else None
        elif line.startswith("Environment="):
            for word in shlex.split(line.removeprefix("Environment=")):
                key, sep, value = word.partition("=")
                if sep:
                    env[key] = value
    return config, env

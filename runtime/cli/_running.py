"""The running daemon's own paths, for `wasmgate doctor`.

Doctor must check the files the daemon really uses: a ``serve --demo`` daemon serves from
``<data_dir>/demo``, and a unit's ``--config`` and ``Environment=`` may name other paths than
the shell doctor runs in. The daemon says which in ``/v1/status`` (``components.paths``);
asked on the configured HTTP port over loopback, with a short timeout.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from wasmgate.runtime.cli._checks import Finding
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.config_local import PathSettings
from wasmgate.typed import replace

TIMEOUT_S = 2.0
_KEYS = ("data_dir", "bundle_dir", "state_dir", "cache_dir", "trust_file")


def status_url(settings: Settings) -> str:
    host = settings.http.host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.http.port}/v1/status"


def running_paths(settings: Settings) -> tuple[Settings, Finding]:
    """``settings`` with the running daemon's paths, and a finding saying whose were checked."""
    url = status_url(settings)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:  # noqa: S310 - http only
            doc = json.loads(answer.read())
        paths = doc["components"]["paths"]
        found = {k: Path(str(paths[k])) for k in _KEYS}
    except (OSError, ValueError, KeyError, TypeError) as e:
        reason = getattr(e, "reason", e)
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

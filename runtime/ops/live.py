"""The settings in force now: replaced as a whole on SIGHUP (the app itself is frozen)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wasmgate.runtime.ops.config import Settings


@dataclass
class LiveSettings:
    """Holder read at request time (management token, limits) and swapped by a reload."""

    settings: Settings
    config_path: Path | None = None

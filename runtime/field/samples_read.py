"""Reading kept samples from the store file, from another process (``wasmgate samples``).

The daemon may be running: the file is opened read-only (``mode=ro``) and, the database
being in WAL mode, this reader sees the last committed state without blocking the daemon's
writer. Samples still listed are those not yet shipped (a delivered sample is acked, i.e.
deleted, by the sink that shipped it).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmgate.runtime.field.samples import SAMPLES
from wasmgate.runtime.protocol import jsonio

_BUSY_MS = 2000


class SamplesUnreadable(Exception):
    """The store file is missing or is not a readable store."""


@dataclass(frozen=True)
class KeptSample:
    id: int
    size: int
    doc: dict[str, Any]
    """The sample document (`wasmgate.runtime.field.samples.SAMPLE_FIELDS`)."""


def read_samples(path: Path) -> list[KeptSample]:
    """Every sample still in the store at ``path``, oldest first."""
    with _readonly(path) as conn:
        try:
            rows = conn.execute(
                "SELECT id, payload FROM records WHERE stream = ? ORDER BY id", (SAMPLES,)
            ).fetchall()
        except sqlite3.Error as e:
            raise SamplesUnreadable(f"store file {path}: {e}") from e
    out = []
    for rid, payload in rows:
        doc = jsonio.loads(bytes(payload))
        if isinstance(doc, dict):
            out.append(KeptSample(int(rid), len(payload), doc))
    return out


@contextlib.contextmanager
def _readonly(path: Path) -> Iterator[sqlite3.Connection]:
    if not path.is_file():
        raise SamplesUnreadable(f"store file {path} does not exist (no sample kept yet?)")
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=_BUSY_MS / 1000
        )
    except sqlite3.Error as e:
        raise SamplesUnreadable(f"store file {path}: {e}") from e
    try:
        yield conn
    finally:
        conn.close()

"""What each bundle file held when it was verified, so an unchanged file is not read again.

Every start installs each file of the bundle directory; a file holding the version that
already serves costs a full read, hash and staging copy only to be found the same (tens of
ms per start). `SeenFiles` remembers, per file path, the file's `Stamp` (size, mtime,
ctime, inode, device) with the manifest digest of the bundle it held when it was verified,
in ``<state_dir>/files.json``, beside the store's state.

Invariants:
- A remembered digest is a claim about a bundle *file* only, never about the store: what
  serves is always the store's own copy, verified as before (its record's signature at
  start-up, each blob's hash before its load). A wrong or forged entry can therefore at most
  skip re-installing the version that is already installed and serving.
- The stamp holds ``st_ctime_ns``, which no unprivileged program can set and which every
  write, ``utime``, rename or chmod moves: a file rewritten in place with the same size and
  its old mtime put back (``os.utime``, ``cp -p``, ``touch -r``) no longer matches, so it is
  read and verified like any new file (and a newer version in it installs).
- A stamp is not remembered while the file's ctime is within `RACY_NS` of the moment it
  was taken (git's "racily clean" rule): a write in the same timestamp tick would leave
  ctime unchanged. The next start hashes such a file once more and remembers it then.
- The file is only a cache: written atomically (`atomic_write`); a missing, damaged or
  unknown-format file is ignored (every file is then hashed, as without it), never an error.
"""

from __future__ import annotations

import json
import logging
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from wasmgate.signing.state import atomic_write

log = logging.getLogger("wasmgate.signing")

FILES = "files.json"
FORMAT = "wasmgate-files/1"
RACY_NS = 2_000_000_000
"""Two seconds: coarse file-system clocks tick in ms, FAT-like ones in 1-2 s."""
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Stamp:
    """Everything ``stat`` says changes with a file's content (or its replacement)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int
    settled: bool = field(default=True, compare=False)
    """False when the file changed too recently to be told apart from a write that follows."""

    def as_list(self) -> list[int]:
        return [self.size, self.mtime_ns, self.ctime_ns, self.ino, self.dev]


def stamp(path: Path) -> Stamp | None:
    """The stamp of ``path`` now (symlinks followed); None unless it is a regular file."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    settled = st.st_ctime_ns < time.time_ns() - RACY_NS
    return Stamp(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, settled)


def _key(path: Path) -> str:
    return str(path.absolute())  # not resolve(): a symlink's target is in the stamp


class SeenFiles:
    """The remembered (stamp, manifest digest) of each bundle file, in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILES
        self._entries: dict[str, tuple[list[int], str]] | None = None
        self._dirty = False

    def digest(self, path: Path, now: Stamp) -> str | None:
        """The digest ``path`` held when it had exactly the stamp ``now``; else None."""
        entry = self._load().get(_key(path))
        if entry is None or entry[0] != now.as_list():
            return None
        return entry[1]

    def remember(self, path: Path, taken: Stamp, digest: str) -> None:
        """``path`` held bundle ``digest`` while it had stamp ``taken`` (see `save`)."""
        entries = self._load()
        key = _key(path)
        if not taken.settled:
            self._dirty |= entries.pop(key, None) is not None
            return
        entry = (taken.as_list(), digest)
        if entries.get(key) != entry:
            entries[key] = entry
            self._dirty = True

    def save(self, files: Iterable[Path]) -> None:
        """Forget every path but ``files``, then persist if anything changed (blocking)."""
        entries = self._load()
        keep = {_key(p) for p in files}
        for key in [k for k in entries if k not in keep]:
            del entries[key]
            self._dirty = True
        if not self._dirty:
            return
        body = {
            "format": FORMAT,
            "files": {k: {"stamp": s, "digest": d} for k, (s, d) in entries.items()},
        }
        try:
            atomic_write(self.path, json.dumps(body, sort_keys=True).encode())
        except OSError as e:  # only costs hashing the files again at the next start
            log.warning("could not save %s: %s", self.path, e)
            return
        self._dirty = False

    def _load(self) -> dict[str, tuple[list[int], str]]:
        if self._entries is None:
            self._entries = _read(self.path)
        return self._entries


def _read(path: Path) -> dict[str, tuple[list[int], str]]:
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring %s (%s): the bundle files are verified again", path, e)
        return {}
    files = body.get("files") if isinstance(body, dict) and body.get("format") == FORMAT else {}
    out: dict[str, tuple[list[int], str]] = {}
    for key, entry in files.items() if isinstance(files, dict) else ():
        parsed = _entry(entry)
        if parsed is not None:
            out[key] = parsed
    return out


def _entry(entry: object) -> tuple[list[int], str] | None:
    """One entry of the file, or None when it is not exactly what `save` writes."""
    if not isinstance(entry, dict):
        return None
    numbers, digest = entry.get("stamp"), entry.get("digest")
    if not isinstance(numbers, list) or len(numbers) != 5:
        return None
    if not all(type(n) is int for n in numbers) or not isinstance(digest, str):
        return None
    return (numbers, digest) if _HEX64.fullmatch(digest) else None

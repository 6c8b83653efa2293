"""DerivedCache: an entry is used only if this daemon stored it for this source and options.

Both loaders are attacked the same way (edited, torn, foreign, renamed, planted non-files);
the sealed one also keeps what it checked when the file changes right after the check.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from wasmgate.signing.derived import KEY_FILE, MAGIC, DerivedCache

SRC, OPTS = "ab" * 32, "opts:1"
DATA = b"derived graph " * 500


def _plain(cache: DerivedCache, name: str, src: str = SRC, opts: str = OPTS) -> bytes | None:
    return cache.load(name, src, opts)


def _sealed(cache: DerivedCache, name: str, src: str = SRC, opts: str = OPTS) -> bytes | None:
    found = cache.load_sealed(name, src, opts)
    if found is None:
        return None
    with found:
        return found.data


Loader = Callable[..., bytes | None]
LOADERS = pytest.mark.parametrize("load", [_plain, _sealed], ids=["bytes", "sealed"])


@pytest.fixture
def cache(tmp_path: Path) -> DerivedCache:
    made = DerivedCache(tmp_path / "c")
    made.store("e", SRC, OPTS, DATA)
    return made


@LOADERS
def test_round_trip(cache: DerivedCache, load: Loader) -> None:
    assert load(cache, "e") == DATA
    assert load(cache, "e") == DATA  # an accepted entry stays


@LOADERS
def test_missing_entry_is_none_without_a_warning(
    cache: DerivedCache, load: Loader, caplog: pytest.LogCaptureFixture
) -> None:
    assert load(cache, "absent") is None
    assert not caplog.records


@LOADERS
@pytest.mark.parametrize(
    "edit",
    [
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # one bit of the data
        lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],  # one bit of the tag
        lambda b: b"WGDERIV0" + b[8:],  # the magic
        lambda b: b[:-100],  # torn body
        lambda b: b[:30],  # torn header
        lambda _: b"",  # empty
        lambda b: b + b"more",  # grown
    ],
    ids=["data", "tag", "magic", "torn-body", "torn-head", "empty", "grown"],
)
def test_edited_entry_is_refused_and_removed(
    cache: DerivedCache,
    load: Loader,
    edit: Callable[[bytes], bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = cache.folder / "e"
    entry.write_bytes(edit(entry.read_bytes()))
    with caplog.at_level(logging.WARNING, "wasmgate.cache"):
        assert load(cache, "e") is None
    assert f"cache entry {entry} refused" in caplog.text
    assert not entry.exists()


@LOADERS
def test_entry_for_another_source_or_options_is_refused(cache: DerivedCache, load: Loader) -> None:
    assert load(cache, "e", src="cd" * 32) is None
    cache.store("e", SRC, OPTS, DATA)
    assert load(cache, "e", opts="opts:2") is None


@LOADERS
def test_entry_under_another_name_is_bound_by_its_source(cache: DerivedCache, load: Loader) -> None:
    """Copying a valid entry over another model's name does not make it that model's."""
    cache.store("other", "cd" * 32, OPTS, b"other model graph")
    (cache.folder / "other").write_bytes((cache.folder / "e").read_bytes())
    assert load(cache, "other", src="cd" * 32) is None


@LOADERS
def test_entry_from_another_daemon_key_is_refused(tmp_path: Path, load: Loader) -> None:
    ours, theirs = DerivedCache(tmp_path / "ours"), DerivedCache(tmp_path / "theirs")
    theirs.store("e", SRC, OPTS, DATA)
    (ours.folder / "e").write_bytes((theirs.folder / "e").read_bytes())
    assert load(ours, "e") is None


@LOADERS
def test_a_loose_key_is_replaced_and_old_entries_refused(cache: DerivedCache, load: Loader) -> None:
    (cache.folder / KEY_FILE).chmod(0o644)
    reopened = DerivedCache(cache.folder)
    assert (cache.folder / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert load(reopened, "e") is None


@LOADERS
def test_a_symlink_is_not_followed(
    cache: DerivedCache, load: Loader, caplog: pytest.LogCaptureFixture
) -> None:
    (cache.folder / "link").symlink_to(cache.folder / "e")
    assert load(cache, "link") is None
    assert "link unreadable" in caplog.text
    assert load(cache, "e") == DATA


@LOADERS
@pytest.mark.parametrize("plant", ["fifo", "directory"])
def test_a_planted_non_file_is_refused_without_hanging(
    cache: DerivedCache, load: Loader, plant: str
) -> None:
    entry = cache.folder / "planted"
    if plant == "fifo":
        os.mkfifo(entry)
    else:
        entry.mkdir()
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(load(cache, "planted")), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "a FIFO under an entry's name hung the loader"
    assert result == [None]


def test_sealed_copy_keeps_what_was_checked_when_the_file_changes(cache: DerivedCache) -> None:
    found = cache.load_sealed("e", SRC, OPTS)
    assert found is not None
    entry = cache.folder / "e"
    with entry.open("r+b") as f:  # rewritten in place, after the check, before the use
        f.seek(len(MAGIC) + 32)
        f.write(b"X" * 64)
    with found:
        assert found.path is not None
        assert Path(found.path).read_bytes() == DATA


def test_sealed_loader_leaks_no_descriptor(cache: DerivedCache) -> None:
    before = sum(1 for _ in Path("/proc/self/fd").iterdir())
    for _ in range(20):
        found = cache.load_sealed("e", SRC, OPTS)
        assert found is not None
        found.close()
    assert cache.load_sealed("e", "cd" * 32, OPTS) is None  # refused: its copy is closed too
    assert sum(1 for _ in Path("/proc/self/fd").iterdir()) == before

"""wasmgate.sealed: a sealed copy cannot change, whoever holds it, and leaks no descriptor."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from pathlib import Path

import pytest

from wasmgate.sealed import SEALS, SealedFile


def _fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def test_bytes_read_back_through_view_data_and_path() -> None:
    with SealedFile.from_bytes(b"verified bytes") as sealed:
        with sealed.view() as view:
            assert bytes(view) == b"verified bytes"
        assert sealed.data == b"verified bytes"
        assert sealed.path is not None
        assert Path(sealed.path).read_bytes() == b"verified bytes"


def test_all_seals_are_set() -> None:
    with SealedFile.from_bytes(b"x" * 100) as sealed:
        assert sealed.path is not None
        fd = int(sealed.path.rsplit("/", 1)[1])
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS


def test_no_one_can_write_truncate_grow_or_map_it_writable() -> None:
    with SealedFile.from_bytes(b"abcdef") as sealed:
        assert sealed.path is not None
        # Reopened through /proc for writing, as another holder of the path would.
        fd = os.open(sealed.path, os.O_RDWR)
        try:
            for attempt in (
                lambda: os.write(fd, b"Z"),
                lambda: os.pwrite(fd, b"Z", 0),
                lambda: os.ftruncate(fd, 2),
                lambda: os.ftruncate(fd, 100),
                lambda: mmap.mmap(fd, 6, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE),
                lambda: fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0),
            ):
                with pytest.raises(OSError) as err:
                    attempt()
                assert err.value.errno == errno.EPERM
        finally:
            os.close(fd)
        assert sealed.data == b"abcdef"


def test_copy_of_a_file_range_does_not_follow_later_edits(tmp_path: Path) -> None:
    source = tmp_path / "entry"
    source.write_bytes(b"HEAD" + b"body" * 1000)
    with source.open("rb") as f:
        sealed = SealedFile.copy_of(f.fileno(), 4, 4000)
    source.write_bytes(b"HEAD" + b"EVIL" * 1000)  # the file changes after it was checked
    with sealed, sealed.view() as view:
        assert bytes(view) == b"body" * 1000


def test_large_copy_is_exact(tmp_path: Path) -> None:
    payload = os.urandom(24 << 20)
    source = tmp_path / "big"
    source.write_bytes(b"h" * 40 + payload)
    with source.open("rb") as f, SealedFile.copy_of(f.fileno(), 40, len(payload)) as sealed:
        assert sealed.size == len(payload)
        with sealed.view() as view:
            assert view == payload


def test_a_short_source_raises_and_leaks_nothing(tmp_path: Path) -> None:
    source = tmp_path / "short"
    source.write_bytes(b"only ten b")
    before = _fds()
    with source.open("rb") as f, pytest.raises(OSError, match="early"):
        SealedFile.copy_of(f.fileno(), 0, 11)
    assert _fds() == before


def test_close_releases_the_descriptor_and_is_idempotent() -> None:
    before = _fds()
    sealed = SealedFile.from_bytes(b"x")
    assert _fds() == before + 1
    sealed.close()
    sealed.close()
    assert _fds() == before
    assert sealed.path is None


def test_empty_content() -> None:
    with SealedFile.from_bytes(b"") as sealed, sealed.view() as view:
        assert bytes(view) == b""
        assert sealed.data == b""


def test_without_memfd_the_bytes_themselves_are_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_: object) -> int:
        raise OSError(errno.ENOSYS, "seccomp")

    monkeypatch.setattr(os, "memfd_create", refused)
    source = tmp_path / "entry"
    source.write_bytes(b"0123456789")
    with source.open("rb") as f, SealedFile.copy_of(f.fileno(), 2, 5) as sealed:
        assert sealed.path is None
        assert sealed.data == b"23456"
        with sealed.view() as view:
            assert bytes(view) == b"23456"
    with source.open("rb") as f, pytest.raises(OSError, match="early"):
        SealedFile.copy_of(f.fileno(), 8, 5)
    assert SealedFile.from_bytes(bytearray(b"ab")).data == b"ab"


def test_a_source_sendfile_cannot_read_is_copied_in_user_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(*_: object) -> int:
        raise OSError(errno.EINVAL, "sendfile")

    monkeypatch.setattr(os, "sendfile", unsupported)
    source = tmp_path / "entry"
    source.write_bytes(b"xxpayload")
    with source.open("rb") as f, SealedFile.copy_of(f.fileno(), 2, 7) as sealed:
        assert sealed.path is not None
        assert sealed.data == b"payload"

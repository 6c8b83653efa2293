"""Bundle store: install results, blobs, re-hash before load, removal, recheck."""

from __future__ import annotations

import hashlib
import os
import tarfile
import threading
from pathlib import Path

import pytest

from tests.signing.conftest import MAX_BUNDLE, Kit, snapshot
from wasmgate.signing import (
    BlobIntegrityError,
    BlobNotFoundError,
    BundleStore,
    FileHashError,
    MalformedArchiveError,
    RevokedKeyError,
    RollbackError,
    SigningError,
    StoreIOError,
    TruncatedArchiveError,
    TrustStore,
    key_id_of,
    verify_bundle,
)


def test_installed_manifest_fields(kit: Kit, store: BundleStore) -> None:
    (bundle,) = store.installed()
    m = bundle.manifest
    assert (m.name, m.version) == ("digits", 5)
    assert m.adapter is not None
    assert m.adapter.file == "adapter.wasm"
    assert m.models[0].variants == {"fp32": "digits-fp32.onnx", "int8": "digits-int8.onnx"}
    assert m.models[0].inputs[0].shape == [-1, 64]
    assert m.routes.http == "digits"
    assert m.params == {"confidence_threshold": 0.6, "label": "digit"}
    assert m.fallback.allowed
    assert not m.fallback.on_error
    assert m.key_id == key_id_of(kit.key.verify_key)


def test_blobs_are_the_file_bytes(kit: Kit, store: BundleStore) -> None:
    m = store.installed()[0].manifest
    expected = (kit.root / "src" / "models" / "digits-int8.onnx").read_bytes()
    digest = m.file_digest("digits-int8.onnx")
    assert digest == hashlib.sha256(expected).hexdigest()
    assert store.open_blob(digest) == expected
    assert store.verify_blob_again(digest) == expected


def test_verify_blob_again_detects_tampering(store: BundleStore) -> None:
    digest = store.installed()[0].manifest.file_digest("digits-fp32.onnx")
    blob = store.state_dir / "blobs" / digest
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(BlobIntegrityError, match=digest):
        store.verify_blob_again(digest)


def test_open_blob_refuses_non_digests(store: BundleStore) -> None:
    with pytest.raises(BlobNotFoundError, match="not a SHA-256"):
        store.open_blob("../state.json")
    with pytest.raises(BlobNotFoundError, match="not in the store"):
        store.open_blob("0" * 64)


def test_reinstall_same_bundle_is_idempotent(kit: Kit, tmp_path: Path, trust: TrustStore) -> None:
    data = kit.build(2)
    store = BundleStore(tmp_path / "s2", trust, max_bundle_bytes=MAX_BUNDLE)
    first = store.install(data)
    assert store.install(data) == first
    assert len(store.installed()) == 1


def test_install_from_path(kit: Kit, store: BundleStore) -> None:
    path = kit.root / "digits-6.wgb"
    path.write_bytes(kit.build(6))
    assert store.install(path).manifest.version == 6


def test_remove_keeps_the_floor(kit: Kit, store: BundleStore) -> None:
    store.remove("digits")
    assert store.installed() == []
    assert store.floors() == {"digits": 5}
    with pytest.raises(RollbackError):
        store.install(kit.build(4))


def test_recheck_reports_revoked_signer(kit: Kit, store: BundleStore) -> None:
    assert store.recheck() == {}
    store.trust = store.trust.with_revoked(key_id=key_id_of(kit.key.verify_key))
    problems = store.recheck()
    assert isinstance(problems["digits"], RevokedKeyError)


def test_verify_without_store(kit: Kit, trust: TrustStore) -> None:
    verified = verify_bundle(kit.build(9), trust, max_bundle_bytes=MAX_BUNDLE)
    assert verified.manifest.version == 9
    assert verified.digest == hashlib.sha256(verified.manifest_bytes).hexdigest()


def test_verify_file_matches_bytes_and_unmaps(kit: Kit, trust: TrustStore, tmp_path: Path) -> None:
    data = kit.build(9)
    path = tmp_path / "digits-9.wgb"
    path.write_bytes(data)
    from_file = verify_bundle(path, trust, max_bundle_bytes=MAX_BUNDLE)
    assert from_file == verify_bundle(data, trust, max_bundle_bytes=MAX_BUNDLE)
    # The file is hashed through a mapping; it must be gone once the call returns.
    assert str(path) not in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("flip", FileHashError),
        ("truncate", TruncatedArchiveError),
        ("empty", MalformedArchiveError),
    ],
)
def test_verify_file_refuses_damage(
    kit: Kit, trust: TrustStore, tmp_path: Path, damage: str, error: type[SigningError]
) -> None:
    path = tmp_path / "digits-9.wgb"
    path.write_bytes(kit.build(9))
    with tarfile.open(path) as tf:
        off = tf.getmember("digits-int8.onnx").offset_data
    with path.open("r+b") as f:
        if damage == "flip":
            f.seek(off)
            byte = f.read(1)[0]
            f.seek(off)
            f.write(bytes([byte ^ 1]))
        else:
            f.truncate(off + 100 if damage == "truncate" else 0)
    with pytest.raises(SigningError) as info:
        verify_bundle(path, trust, max_bundle_bytes=MAX_BUNDLE)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"


def test_concurrent_installs_keep_the_highest(kit: Kit, store: BundleStore) -> None:
    bundles = {v: kit.build(v) for v in (6, 7, 8, 9)}
    errors: list[SigningError] = []

    def install(v: int) -> None:
        try:
            store.install(bundles[v])
        except RollbackError as e:
            errors.append(e)

    threads = [threading.Thread(target=install, args=(v,)) for v in bundles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.floors() == {"digits": 9}
    assert [b.manifest.version for b in store.installed()] == [9]
    assert all(isinstance(e, RollbackError) for e in errors)


@pytest.mark.parametrize("from_path", [True, False])
def test_large_multi_chunk_file_is_stored_exactly(
    kit: Kit, trust: TrustStore, tmp_path: Path, from_path: bool
) -> None:
    big = os.urandom(3 * 1024 * 1024 + 12345)  # several read-ahead chunks, odd tail
    (kit.root / "src" / "models" / "digits-fp32.onnx").write_bytes(big)
    data = kit.build(7)
    source: bytes | Path = data
    if from_path:
        source = tmp_path / "big.wgb"
        source.write_bytes(data)
    store = BundleStore(tmp_path / "big-state", trust, max_bundle_bytes=MAX_BUNDLE)
    m = store.install(source).manifest
    digest = m.file_digest("digits-fp32.onnx")
    assert digest == hashlib.sha256(big).hexdigest()
    assert store.verify_blob_again(digest) == big


def test_large_file_tampered_in_last_chunk(kit: Kit, trust: TrustStore, tmp_path: Path) -> None:
    big = os.urandom(3 * 1024 * 1024 + 7)
    (kit.root / "src" / "models" / "digits-fp32.onnx").write_bytes(big)
    data = bytearray(kit.build(7))
    data[data.index(big) + len(big) - 3] ^= 0x40
    path = tmp_path / "bad.wgb"
    path.write_bytes(bytes(data))
    store = BundleStore(tmp_path / "s", trust, max_bundle_bytes=MAX_BUNDLE)
    with pytest.raises(FileHashError, match=r"digits-fp32\.onnx"):
        store.install(path)
    assert store.installed() == []
    assert list((tmp_path / "s" / "blobs").iterdir()) == []


def test_stage_changes_nothing_until_commit(kit: Kit, store: BundleStore) -> None:
    before = snapshot(store)
    staged = store.stage(kit.build(6))
    assert staged.manifest.version == 6
    assert snapshot(store) == before
    reopened = BundleStore(store.state_dir, store.trust, max_bundle_bytes=MAX_BUNDLE)
    assert snapshot(reopened) == before  # e.g. the self-test failed and the daemon restarted
    fp32 = staged.manifest.file_digest("digits-fp32.onnx")
    assert store.verify_blob_again(fp32)  # staged files are loadable for the self-test
    store.commit(staged)
    assert [b.manifest.version for b in store.installed()] == [6]
    assert store.floors() == {"digits": 6}


def test_commit_rechecks_rollback(kit: Kit, store: BundleStore) -> None:
    six, seven = store.stage(kit.build(6)), store.stage(kit.build(7))
    store.commit(seven)
    with pytest.raises(RollbackError, match="version 6 < installed 7"):
        store.commit(six)
    assert [b.manifest.version for b in store.installed()] == [7]


def test_commit_unknown_or_discarded(kit: Kit, store: BundleStore) -> None:
    staged = store.stage(kit.build(6))
    store.discard(staged)
    with pytest.raises(BlobNotFoundError, match="not staged"):
        store.commit(staged)
    assert [b.manifest.version for b in store.installed()] == [5]


def test_gc_keeps_installed_and_staged_blobs(kit: Kit, store: BundleStore) -> None:
    old = store.installed()[0].manifest
    (kit.root / "src" / "models" / "digits-int8.onnx").write_bytes(os.urandom(999))
    store.install(kit.build(6))
    staged = store.stage(kit.build(7, description="candidate"))
    removed = store.gc()
    assert removed == [old.file_digest("digits-int8.onnx")]
    for name in staged.manifest.files:
        store.verify_blob_again(staged.manifest.file_digest(name))
    store.discard(staged)
    assert store.gc() == []  # v7 shares every file with v6
    new = store.installed()[0].manifest
    assert all(store.verify_blob_again(f.sha256) for f in new.files.values())


def test_unwritable_store_is_a_signing_error(kit: Kit, trust: TrustStore, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreIOError, match="bundle store"):
        BundleStore(blocker / "state", trust, max_bundle_bytes=MAX_BUNDLE)


def test_disk_error_during_stage_is_a_signing_error(
    kit: Kit, store: BundleStore, tmp_path: Path
) -> None:
    before = snapshot(store)
    (store.state_dir / "tmp").rmdir()
    (store.state_dir / "tmp").write_text("in the way")
    with pytest.raises(StoreIOError):
        store.install(kit.build(6))
    assert snapshot(store) == before

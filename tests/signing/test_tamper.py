"""The tamper matrix: every hostile bundle is refused with its own error, nothing changes.

The ``store`` fixture has ``digits`` version 5 installed; each case starts from a valid
version 6 (which would install) and breaks exactly one thing. ``refused`` checks the exact
exception type, that version 5 is still installed with the same floors (in memory and
after re-opening the store) and that no staging file is left behind.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import nacl.signing
import pytest

from tests.signing.conftest import Kit
from wasmgate.signing import (
    BUNDLE_PAYLOAD_TYPE,
    TRUST_PAYLOAD_TYPE,
    BadSignatureError,
    BundleStore,
    BundleTooLargeError,
    DuplicateMemberError,
    Envelope,
    ExpiredError,
    FileHashError,
    FileSizeError,
    FutureIssuedError,
    KeyScopeError,
    LimitCeilingError,
    MalformedArchiveError,
    ManifestError,
    MissingFileError,
    OversizeMemberError,
    RevokedBundleError,
    RevokedKeyError,
    RollbackError,
    SigningError,
    TruncatedArchiveError,
    UnlistedFileError,
    UnsafeMemberError,
    UntrustedKeyError,
    VersionConflictError,
    key_id_of,
    sign,
)
from wasmgate.signing.checks import MAX_ISSUE_SKEW

Refused = Callable[[bytes, type[SigningError]], SigningError]


def _flip(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1 :]


def _data_offset(data: bytes, name: str) -> tuple[int, int]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        m = tf.getmember(name)
        return m.offset_data, m.size


def test_valid_next_version_installs(kit: Kit, store: BundleStore) -> None:
    bundle = store.install(kit.build(6))
    assert bundle.manifest.version == 6
    assert [b.manifest.version for b in store.installed()] == [6]


@pytest.mark.parametrize("name", ["adapter.wasm", "digits-fp32.onnx", "digits-int8.onnx"])
def test_byte_flipped_in_each_file(kit: Kit, refused: Refused, name: str) -> None:
    data = kit.build(6)
    off, size = _data_offset(data, name)
    err = refused(_flip(data, off + size // 2), FileHashError)
    assert name in str(err)
    assert "digits@6" in str(err)


def test_byte_flipped_in_manifest(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    off, _ = _data_offset(data, "manifest.json")
    i = data.index(b"8x8 digits", off)
    refused(_flip(data, i), BadSignatureError)


def test_byte_flipped_in_signature(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    off, _ = _data_offset(data, "manifest.sig")
    i = data.index(b'"sig": "', off) + len(b'"sig": "') + 10
    flipped = b"B" if data[i : i + 1] != b"B" else b"C"
    err = refused(data[:i] + flipped + data[i + 1 :], BadSignatureError)
    assert "does not verify" in str(err)


def test_signature_from_another_bundle(kit: Kit, refused: Refused) -> None:
    ours = kit.members(kit.build(6))
    other = kit.members(kit.build(6, description="another bundle"))
    swapped = [ours[0], other[1], *ours[2:]]
    refused(kit.archive(swapped), BadSignatureError)


def test_signed_by_untrusted_key(kit: Kit, refused: Refused) -> None:
    stranger = nacl.signing.SigningKey.generate()
    err = refused(kit.build(6, key=stranger), UntrustedKeyError)
    assert "not trusted" in str(err)


def test_signed_by_revoked_key(kit: Kit, store: BundleStore, refused: Refused) -> None:
    other = nacl.signing.SigningKey.generate()
    store.trust = store.trust.with_signer(other.verify_key, ["digits"], {})
    store.trust = store.trust.with_revoked(key_id=key_id_of(other.verify_key))
    err = refused(kit.build(6, key=other), RevokedKeyError)
    assert key_id_of(other.verify_key) in str(err)


def test_key_scope_does_not_cover_name(kit: Kit, store: BundleStore, refused: Refused) -> None:
    narrow = nacl.signing.SigningKey.generate()
    store.trust = store.trust.with_signer(narrow.verify_key, ["vision.*"], {})
    err = refused(kit.build(6, key=narrow), KeyScopeError)
    assert "'digits'" in str(err)


def _claiming(manifest: dict[str, object], field: str, name: str) -> dict[str, object]:
    if field.startswith("routes."):
        routes = manifest["routes"]
        assert isinstance(routes, dict)
        routes[field.removeprefix("routes.")] = name
    elif field == "models[0].name":
        models = manifest["models"]
        assert isinstance(models, list)
        models[0]["name"] = name
    else:
        manifest[field] = name
    return manifest


@pytest.mark.parametrize(
    "field",
    # Every name a signer can make reachable (signing/scope.py): the event topic is
    # events/<routes.http>, so the routes.http case states it too.
    ["name", "routes.http", "routes.mqtt", "models[0].name"],
)
def test_every_claimed_name_must_be_in_scope(kit: Kit, refused: Refused, field: str) -> None:
    """The kit's key may sign ``digits*``: claiming ``victim`` anywhere is refused."""
    data = kit.build(6)
    manifest = _claiming(kit.manifest(data), field, "victim")
    err = refused(kit.archive(kit.signed_head(manifest) + kit.members(data)[2:]), KeyScopeError)
    assert f"{field} 'victim'" in str(err)


def test_expired(kit: Kit, refused: Refused) -> None:
    past = datetime.now(UTC) - timedelta(days=10)
    err = refused(kit.build(6, now=past, expires_in=timedelta(days=1)), ExpiredError)
    assert "expired" in str(err)


def test_issued_in_the_future(kit: Kit, store: BundleStore, refused: Refused) -> None:
    """A signer's claim of a far future never installs nor moves the clock floor."""
    floor = store.clock_floor
    future = datetime.now(UTC) + timedelta(days=3650)
    err = refused(kit.build(6, now=future, expires_in=timedelta(days=3700)), FutureIssuedError)
    assert "in the future" in str(err)
    assert store.clock_floor == floor
    assert BundleStore(store.state_dir, store.trust, max_bundle_bytes=4096).clock_floor == floor


def test_issued_within_the_clock_skew_installs(kit: Kit, store: BundleStore) -> None:
    ahead = datetime.now(UTC) + MAX_ISSUE_SKEW - timedelta(seconds=30)
    store.install(kit.build(6, now=ahead))
    assert store.clock_floor is not None
    assert store.clock_floor < ahead  # the local clock moved it, not the bundle's claim


def test_version_rollback(kit: Kit, refused: Refused) -> None:
    err = refused(kit.build(4), RollbackError)
    assert "version 4 < installed 5" in str(err)


def test_same_version_other_content(kit: Kit, refused: Refused) -> None:
    refused(kit.build(5, description="changed"), VersionConflictError)


def _with_extra(kit: Kit, extra: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    members = kit.members(kit.build(6))
    plain = [(tarfile.TarInfo(n), d) for n, d in members]
    return kit.raw_tar(plain + extra)


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        (_info("../evil.wasm"), "path traversal"),
        (_info("/etc/passwd"), "absolute path"),
        (_info("sub/dir.bin"), "directories are not allowed"),
        (_info(".hidden"), "not a plain file name"),
        (_info("link.onnx", tarfile.SYMTYPE, "/etc/shadow"), "symbolic link"),
        (_info("hard.onnx", tarfile.LNKTYPE, "adapter.wasm"), "hard link"),
        (_info("null", tarfile.CHRTYPE), "character device"),
        (_info("disk", tarfile.BLKTYPE), "block device"),
        (_info("pipe", tarfile.FIFOTYPE), "FIFO"),
        (_info("dir", tarfile.DIRTYPE), "directory"),
    ],
)
def test_unsafe_members(kit: Kit, refused: Refused, info: tarfile.TarInfo, reason: str) -> None:
    err = refused(_with_extra(kit, [(info, b"x")]), UnsafeMemberError)
    assert reason in str(err)


def test_pax_header_refused(kit: Kit, refused: Refused) -> None:
    members = [(n, d) for n, d in kit.members(kit.build(6))]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for n, d in members:
            info = tarfile.TarInfo(n)
            info.size = len(d)
            info.pax_headers = {"comment": "x"} if n == "adapter.wasm" else {}
            tf.addfile(info, io.BytesIO(d))
    err = refused(buf.getvalue(), UnsafeMemberError)
    assert "pax" in str(err)


def test_duplicate_member(kit: Kit, refused: Refused) -> None:
    members = kit.members(kit.build(6))
    err = refused(kit.archive([*members, members[2]]), DuplicateMemberError)
    assert members[2][0] in str(err)


def test_duplicate_manifest_member(kit: Kit, refused: Refused) -> None:
    members = kit.members(kit.build(6))
    refused(kit.archive([*members, members[0]]), DuplicateMemberError)


def test_unlisted_extra_file(kit: Kit, refused: Refused) -> None:
    members = kit.members(kit.build(6))
    err = refused(kit.archive([*members, ("notes.txt", b"hello")]), UnlistedFileError)
    assert "notes.txt" in str(err)


def test_missing_file(kit: Kit, refused: Refused) -> None:
    members = kit.members(kit.build(6))
    err = refused(kit.archive(members[:-1]), MissingFileError)
    assert members[-1][0] in str(err)


def test_truncated_archive(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    refused(data[: len(data) // 2], TruncatedArchiveError)


def test_truncated_before_end_marker(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    off, size = _data_offset(data, "digits-int8.onnx")
    end = off + size + (-size % 512)
    refused(data[:end], TruncatedArchiveError)


def test_member_declaring_2gb(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    off, size = _data_offset(data, "digits-int8.onnx")
    body = data[: off + size + (-size % 512)]
    big = tarfile.TarInfo("huge.onnx")
    big.size = 2 * 1024**3
    data = body + big.tobuf(tarfile.USTAR_FORMAT) + os.urandom(4096)
    err = refused(data, OversizeMemberError)
    assert str(2 * 1024**3) in str(err)


def test_random_bytes(refused: Refused) -> None:
    refused(os.urandom(20000), MalformedArchiveError)


def test_empty_file(refused: Refused) -> None:
    err = refused(b"", MalformedArchiveError)
    assert "empty" in str(err)


def test_trailing_data_after_end_marker(kit: Kit, refused: Refused) -> None:
    refused(kit.build(6) + b"hidden payload", MalformedArchiveError)


def test_file_size_mismatch(kit: Kit, refused: Refused) -> None:
    members = kit.members(kit.build(6))
    manifest = kit.manifest(kit.build(6))
    files = manifest["files"]
    assert isinstance(files, dict)
    files["adapter.wasm"]["size"] += 1
    err = refused(kit.archive(kit.signed_head(manifest) + members[2:]), FileSizeError)
    assert "adapter.wasm" in str(err)


def test_unknown_manifest_field_signed(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    manifest = kit.manifest(data) | {"surprise": True}
    err = refused(kit.archive(kit.signed_head(manifest) + kit.members(data)[2:]), ManifestError)
    assert "surprise" in str(err)


def test_manifest_key_id_mismatch(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    manifest = kit.manifest(data) | {"key_id": "0" * 64}
    refused(kit.archive(kit.signed_head(manifest) + kit.members(data)[2:]), BadSignatureError)


def test_trust_signature_cannot_sign_bundle(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    members = kit.members(data)
    sig = sign(kit.key, TRUST_PAYLOAD_TYPE, members[0][1])
    env = Envelope(payload_type=BUNDLE_PAYLOAD_TYPE, signatures=[sig])
    swapped = [members[0], ("manifest.sig", env.to_json()), *members[2:]]
    refused(kit.archive(swapped), BadSignatureError)


def test_limit_ceiling(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    manifest = kit.manifest(data)
    limits = manifest["limits"]
    assert isinstance(limits, dict)
    limits["memory_mb"] = 512
    err = refused(kit.archive(kit.signed_head(manifest) + kit.members(data)[2:]), LimitCeilingError)
    assert "memory_mb" in str(err)


def test_revoked_bundle_digest(kit: Kit, store: BundleStore, refused: Refused) -> None:
    data = kit.build(6)
    digest = hashlib.sha256(kit.members(data)[0][1]).hexdigest()
    store.trust = store.trust.with_revoked(digest=digest)
    refused(data, RevokedBundleError)


def test_bundle_larger_than_cap(kit: Kit, store: BundleStore) -> None:
    small = BundleStore(store.state_dir, store.trust, max_bundle_bytes=4096)
    with pytest.raises(BundleTooLargeError, match=r"cap is 4096 \(limits\.max_bundle_bytes\)"):
        small.install(kit.build(6))
    assert [b.manifest.version for b in small.installed()] == [5]


def test_manifest_json_duplicate_keys(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    members = kit.members(data)
    body = members[0][1].replace(b'"version": 6', b'"version": 6, "version": 7', 1)
    env = Envelope(
        payload_type=BUNDLE_PAYLOAD_TYPE, signatures=[sign(kit.key, BUNDLE_PAYLOAD_TYPE, body)]
    )
    err = refused(
        kit.archive([("manifest.json", body), ("manifest.sig", env.to_json()), *members[2:]]),
        ManifestError,
    )
    assert "duplicate" in str(err)

"""Trust store: name scopes, ceilings, revocation, root-signed files and TUF rotation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest

from tests.signing.conftest import MAX_BUNDLE, Kit, snapshot
from wasmgate.signing import (
    BundleStore,
    TrustDoc,
    TrustExpiredError,
    TrustFileError,
    TrustRollbackError,
    TrustSignatureError,
    TrustStore,
    encode_public,
    key_id_of,
    sign_trust,
)
from wasmgate.signing.envelope import parse_envelope
from wasmgate.typed import convert, plain


def _doc(
    version: int, roots: list[nacl.signing.SigningKey], threshold: int = 1, **kw: object
) -> TrustDoc:
    root = {
        "keys": {key_id_of(k.verify_key): encode_public(k.verify_key) for k in roots},
        "threshold": threshold,
    }
    data: dict[str, object] = {"version": version, "root": root, **kw}
    return convert(data, TrustDoc)


def _signer(kit: Kit) -> dict[str, object]:
    kid = key_id_of(kit.key.verify_key)
    return {kid: {"public": encode_public(kit.key.verify_key), "names": ["digits*"]}}


@pytest.fixture
def roots() -> list[nacl.signing.SigningKey]:
    return [nacl.signing.SigningKey.generate() for _ in range(4)]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_signed_trust_file_lets_its_signers_install(
    kit: Kit, roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    trust_file = _write(
        tmp_path / "trust.json", sign_trust(_doc(1, roots[:1], signers=_signer(kit)), roots[:1])
    )
    trust = TrustStore.load(trust_file, pin_dir=tmp_path)
    assert trust.signed
    assert (tmp_path / "trust.pinned.json").exists()
    store = BundleStore(tmp_path / "s", trust, max_bundle_bytes=MAX_BUNDLE)
    assert store.install(kit.build(1)).manifest.version == 1


def test_rotation_needs_old_and_new_root(
    roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    old, new = roots[0], roots[1]
    path = _write(tmp_path / "trust.json", sign_trust(_doc(1, [old]), [old]))
    TrustStore.load(path, pin_dir=tmp_path)
    _write(path, sign_trust(_doc(2, [new]), [new]))
    with pytest.raises(TrustSignatureError, match="rotation from version 1"):
        TrustStore.load(path, pin_dir=tmp_path)
    _write(path, sign_trust(_doc(2, [new]), [old]))
    with pytest.raises(TrustSignatureError, match="0 valid root signature"):
        TrustStore.load(path, pin_dir=tmp_path)
    _write(path, sign_trust(_doc(2, [new]), [old, new]))
    assert TrustStore.load(path, pin_dir=tmp_path).doc.version == 2
    # version 3 now needs the *new* root; the old one alone is not enough any more
    _write(path, sign_trust(_doc(3, [old]), [old]))
    with pytest.raises(TrustSignatureError):
        TrustStore.load(path, pin_dir=tmp_path)


def test_failed_rotation_leaves_bundles_installed(
    kit: Kit, roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    path = _write(
        tmp_path / "trust.json", sign_trust(_doc(1, roots[:1], signers=_signer(kit)), roots[:1])
    )
    store = BundleStore(
        tmp_path / "s", TrustStore.load(path, pin_dir=tmp_path), max_bundle_bytes=MAX_BUNDLE
    )
    store.install(kit.build(3))
    before = snapshot(store)
    _write(path, sign_trust(_doc(2, roots[1:2]), roots[1:2]))
    with pytest.raises(TrustSignatureError):
        store.trust = TrustStore.load(path, pin_dir=tmp_path)
    assert snapshot(store) == before
    assert store.recheck() == {}


def test_trust_rollback_and_skips_refused(
    roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    r = roots[:1]
    path = tmp_path / "trust.json"
    v1 = sign_trust(_doc(1, r), r)
    _write(path, sign_trust(_doc(2, r), r))
    TrustStore.load(path, pin_dir=tmp_path)
    _write(path, v1)
    with pytest.raises(TrustRollbackError, match="version 1 <= pinned 2"):
        TrustStore.load(path, pin_dir=tmp_path)
    _write(path, sign_trust(_doc(4, r), r))
    with pytest.raises(TrustRollbackError, match="skips"):
        TrustStore.load(path, pin_dir=tmp_path)


def test_unsigned_file_cannot_replace_pinned_signed(
    roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    path = _write(tmp_path / "trust.json", sign_trust(_doc(1, roots[:1]), roots[:1]))
    TrustStore.load(path, pin_dir=tmp_path)
    _write(path, TrustDoc(version=9).to_json())
    with pytest.raises(TrustSignatureError, match="unsigned"):
        TrustStore.load(path, pin_dir=tmp_path)


def test_threshold_counts_each_key_once(
    roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    signed = sign_trust(_doc(1, roots[:3], threshold=2), [roots[0]])
    env = json.loads(signed)
    env["signatures"] = env["signatures"] * 2
    with pytest.raises(TrustSignatureError, match="1 valid root signature"):
        TrustStore.from_bytes(json.dumps(env).encode())
    ok = sign_trust(_doc(1, roots[:3], threshold=2), [roots[0], roots[2]])
    assert TrustStore.from_bytes(ok).doc.root is not None


def test_expired_signed_trust(roots: list[nacl.signing.SigningKey], tmp_path: Path) -> None:
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    path = _write(tmp_path / "trust.json", sign_trust(_doc(1, roots[:1], expires=past), roots[:1]))
    with pytest.raises(TrustExpiredError):
        TrustStore.load(path)


def test_signed_trust_cannot_be_edited(roots: list[nacl.signing.SigningKey]) -> None:
    trust = TrustStore.from_bytes(sign_trust(_doc(1, roots[:1]), roots[:1]))
    with pytest.raises(TrustFileError, match="re-sign"):
        trust.with_revoked(key_id="0" * 64)


def test_bundle_signature_is_not_a_trust_signature(
    kit: Kit, roots: list[nacl.signing.SigningKey]
) -> None:
    doc = _doc(1, roots[:1])
    signed = json.loads(sign_trust(doc, roots[:1]))
    bundle_sig = parse_envelope(kit.members(kit.build(1))[1][1]).signatures[0]
    signed["signatures"] = [plain(bundle_sig)]
    with pytest.raises(TrustSignatureError):
        TrustStore.from_bytes(json.dumps(signed).encode())


def test_key_id_must_match_public_key(kit: Kit) -> None:
    data = {"signers": {"0" * 64: {"public": encode_public(kit.key.verify_key), "names": ["*"]}}}
    with pytest.raises(TrustFileError, match="does not match"):
        TrustStore.from_bytes(json.dumps(data).encode())


def test_bad_public_key_in_trust_file() -> None:
    data = {"signers": {"0" * 64: {"public": "!!", "names": ["*"]}}}
    with pytest.raises(TrustFileError, match="not base64"):
        TrustStore.from_bytes(json.dumps(data).encode())


def test_unknown_fields_refused() -> None:
    with pytest.raises(TrustFileError, match=r"admins: unknown field \(not allowed here\)"):
        TrustStore.from_bytes(b'{"version": 1, "admins": []}')


def test_edits_bump_version_and_save(kit: Kit, tmp_path: Path) -> None:
    trust = TrustStore.empty().with_signer(kit.key.verify_key, ["digits*"], {"memory_mb": 64})
    trust = trust.with_revoked(digest="a" * 64)
    path = tmp_path / "sub" / "trust.json"
    trust.save(path)
    loaded = TrustStore.load(path)
    assert loaded.doc.version == 3
    assert loaded.doc.revoked.bundles == ["a" * 64]
    assert loaded.doc.signers[key_id_of(kit.key.verify_key)].max_limits == {"memory_mb": 64}


def test_missing_trust_file(tmp_path: Path) -> None:
    with pytest.raises(TrustFileError, match="does not exist"):
        TrustStore.load(tmp_path / "nope.json")
    assert TrustStore.load(tmp_path / "nope.json", missing_ok=True).doc.signers == {}


def test_clock_floor_only_from_a_root_signed_file(
    roots: list[nacl.signing.SigningKey], tmp_path: Path
) -> None:
    """An unsigned trust file cannot set the clock floor; a root-signed one does, once."""
    floor = datetime(2030, 1, 1, tzinfo=UTC)
    with pytest.raises(TrustFileError, match="clock_floor is honoured only"):
        TrustStore.from_bytes(json.dumps({"clock_floor": floor.isoformat()}).encode())
    store = BundleStore(tmp_path / "s", TrustStore.empty(), max_bundle_bytes=MAX_BUNDLE)
    signed = TrustStore.from_bytes(
        sign_trust(_doc(1, roots[:1], clock_floor=floor.isoformat()), roots[:1])
    )
    store.use_trust(signed)
    assert store.clock_floor == floor
    reopened = BundleStore(tmp_path / "s", signed, max_bundle_bytes=MAX_BUNDLE)
    assert reopened.clock_floor == floor
    later = TrustStore.from_bytes(
        sign_trust(_doc(2, roots[:1], clock_floor="2029-01-01T00:00:00Z"), roots[:1])
    )
    reopened.use_trust(later)  # a new trust version may lower it (the repair)
    assert reopened.clock_floor == datetime(2029, 1, 1, tzinfo=UTC)
    reopened.use_trust(signed)  # an older version never applies again
    assert reopened.clock_floor == datetime(2029, 1, 1, tzinfo=UTC)

"""Keys: key ids, key files (0600, no overwrite), passphrases, public key forms."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path

import nacl.signing
import pytest

from wasmgate.signing import (
    BUNDLE_PAYLOAD_TYPE,
    TRUST_PAYLOAD_TYPE,
    KeyExistsError,
    KeyFileError,
    encode_public,
    generate_key,
    key_id_of,
    load_public_key,
    pae,
    read_private_key,
    sign,
    verify_signature,
    write_private_key,
    write_public_key,
)
from wasmgate.signing.envelope import EnvelopeFormatError, loads_strict


def test_key_id_is_sha256_of_raw_public_key() -> None:
    key = generate_key()
    assert key_id_of(key.verify_key) == hashlib.sha256(bytes(key.verify_key)).hexdigest()


def test_private_key_file_mode_0600_and_roundtrip(tmp_path: Path) -> None:
    key = generate_key()
    path = tmp_path / "k.key"
    write_private_key(path, key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert bytes(read_private_key(path)) == bytes(key)


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    path.write_text("precious")
    with pytest.raises(KeyExistsError, match="already exists"):
        write_private_key(path, generate_key())
    assert path.read_text() == "precious"


def test_passphrase_roundtrip_and_wrong_passphrase(tmp_path: Path) -> None:
    key = generate_key()
    path = tmp_path / "k.key"
    write_private_key(path, key, b"correct horse")
    doc = json.loads(path.read_text())
    assert "seed" not in doc
    assert doc["encrypted"]["kdf"] == "argon2id"
    assert base64.b64encode(bytes(key)).decode() not in path.read_text()
    assert bytes(read_private_key(path, b"correct horse")) == bytes(key)
    with pytest.raises(KeyFileError, match="wrong passphrase"):
        read_private_key(path, b"wrong")
    with pytest.raises(KeyFileError, match="no passphrase given"):
        read_private_key(path)


def test_excessive_kdf_parameters_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    write_private_key(path, generate_key(), b"pw")
    doc = json.loads(path.read_text())
    doc["encrypted"]["memlimit"] = 64 * 1024**3
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="excessive KDF"):
        read_private_key(path, b"pw")


def test_group_readable_private_key_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    write_private_key(path, generate_key())
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="too open"):
        read_private_key(path)


def test_public_key_forms(tmp_path: Path) -> None:
    key = generate_key()
    pub = tmp_path / "k.pub"
    write_public_key(pub, key.verify_key)
    priv = tmp_path / "k.key"
    write_private_key(priv, key)
    for arg in (str(pub), str(priv), encode_public(key.verify_key)):
        assert bytes(load_public_key(arg)) == bytes(key.verify_key)
    with pytest.raises(KeyFileError, match="not base64"):
        load_public_key("not a key!")
    with pytest.raises(KeyFileError, match="expected 32"):
        load_public_key(base64.b64encode(b"short").decode())


def test_public_key_file_with_wrong_key_id(tmp_path: Path) -> None:
    key = generate_key()
    pub = tmp_path / "k.pub"
    write_public_key(pub, key.verify_key)
    doc = json.loads(pub.read_text()) | {"key_id": "0" * 64}
    pub.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="does not match"):
        load_public_key(str(pub))


def test_pae_encoding() -> None:
    assert pae("t/x", b"hello") == b"DSSEv1 3 t/x 5 hello"


def test_signatures_are_domain_separated() -> None:
    key = nacl.signing.SigningKey.generate()
    body = b'{"version": 1}'
    bundle_sig = sign(key, BUNDLE_PAYLOAD_TYPE, body)
    assert verify_signature(key.verify_key, BUNDLE_PAYLOAD_TYPE, body, bundle_sig)
    assert not verify_signature(key.verify_key, TRUST_PAYLOAD_TYPE, body, bundle_sig)
    other = nacl.signing.SigningKey.generate()
    assert not verify_signature(other.verify_key, BUNDLE_PAYLOAD_TYPE, body, bundle_sig)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b'{"a": 1, "a": 2}', "duplicate"),
        (b'{"a": NaN}', "NaN"),
        (b"[1]", "object"),
        (b"\xff", "JSON"),
    ],
)
def test_strict_json(text: bytes, reason: str) -> None:
    with pytest.raises(EnvelopeFormatError, match=reason):
        loads_strict(text)

"""Ed25519 signing keys: generation, key ids, key files, optional passphrase protection.

Invariants:
- A key id is the lowercase hex SHA-256 of the raw 32-byte Ed25519 public key.
- Private key files are created with ``O_EXCL`` and mode 0600; an existing file is never
  overwritten, and a private key file readable by group or others is refused on load.
- With a passphrase, the 32-byte seed is sealed with PyNaCl ``SecretBox`` under a key
  derived by argon2id (salt and cost stored in the file; costs are capped on load so a
  crafted file cannot exhaust memory). Without one, the seed is stored in the clear.
- Public keys travel as base64 of the raw 32 bytes; key ids as 64 hex digits, so the two
  can never be confused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.pwhash
import nacl.secret
import nacl.signing
import nacl.utils

from wasmgate.signing.errors import KeyExistsError, KeyFileError

PRIVATE_FORMAT = "wasmgate-private-key/1"
PUBLIC_FORMAT = "wasmgate-public-key/1"
_MAX_KEY_FILE = 8192
_KDF_OPS = nacl.pwhash.argon2id.OPSLIMIT_MODERATE
_KDF_MEM = nacl.pwhash.argon2id.MEMLIMIT_INTERACTIVE
_KDF_MAX_MEM = 1024 * 1024 * 1024
_KDF_MAX_OPS = 16


def key_id_of(public: bytes | nacl.signing.VerifyKey) -> str:
    """Return the key id (hex SHA-256 of the raw 32-byte public key)."""
    raw = bytes(public)
    if len(raw) != 32:
        raise KeyFileError(f"an Ed25519 public key has 32 bytes, got {len(raw)}")
    return hashlib.sha256(raw).hexdigest()


def encode_public(public: nacl.signing.VerifyKey) -> str:
    """Return the base64 text form of a public key."""
    return base64.b64encode(bytes(public)).decode("ascii")


def decode_public(text: str) -> nacl.signing.VerifyKey:
    """Parse the base64 text form of a public key; :class:`KeyFileError` if it is not one."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise KeyFileError(f"public key {text[:16]!r}...: not base64") from e
    if len(raw) != 32:
        raise KeyFileError(f"public key {text[:16]!r}...: {len(raw)} bytes, expected 32")
    return nacl.signing.VerifyKey(raw)


def generate_key() -> nacl.signing.SigningKey:
    """Generate a new Ed25519 signing key from the OS random source."""
    return nacl.signing.SigningKey.generate()


def _kdf(passphrase: bytes, salt: bytes, ops: int, mem: int) -> bytes:
    return nacl.pwhash.argon2id.kdf(nacl.secret.SecretBox.KEY_SIZE, passphrase, salt, ops, mem)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _private_doc(key: nacl.signing.SigningKey, passphrase: bytes | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": PRIVATE_FORMAT,
        "algorithm": "ed25519",
        "key_id": key_id_of(key.verify_key),
        "public": encode_public(key.verify_key),
    }
    seed = bytes(key)
    if passphrase is None:
        doc["seed"] = _b64(seed)
        return doc
    salt = nacl.utils.random(nacl.pwhash.argon2id.SALTBYTES)
    box = nacl.secret.SecretBox(_kdf(passphrase, salt, _KDF_OPS, _KDF_MEM))
    doc["encrypted"] = {
        "kdf": "argon2id",
        "opslimit": _KDF_OPS,
        "memlimit": _KDF_MEM,
        "salt": _b64(salt),
        "box": _b64(bytes(box.encrypt(seed))),
    }
    return doc


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError as e:
        raise KeyExistsError(f"key file {path}: already exists, refusing to overwrite") from e
    except OSError as e:
        raise KeyFileError(f"key file {path}: cannot create ({e.strerror})") from e
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private_key(
    path: Path, key: nacl.signing.SigningKey, passphrase: bytes | None = None
) -> None:
    """Write ``key`` to a new file with mode 0600 (sealed if ``passphrase``); never overwrite."""
    if passphrase is not None and not passphrase:
        raise KeyFileError(f"key file {path}: empty passphrase")
    body = json.dumps(_private_doc(key, passphrase), indent=2).encode() + b"\n"
    _write_new(path, body, 0o600)


def write_public_key(path: Path, public: nacl.signing.VerifyKey) -> None:
    """Write a public key file (JSON: format, algorithm, key_id, public); never overwrite."""
    doc = {
        "format": PUBLIC_FORMAT,
        "algorithm": "ed25519",
        "key_id": key_id_of(public),
        "public": encode_public(public),
    }
    _write_new(path, json.dumps(doc, indent=2).encode() + b"\n", 0o644)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise KeyFileError(f"key file {path}: not a regular file")
            data = f.read(_MAX_KEY_FILE + 1)
    except OSError as e:
        raise KeyFileError(f"key file {path}: cannot read ({e.strerror})") from e
    if len(data) > _MAX_KEY_FILE:
        raise KeyFileError(f"key file {path}: larger than {_MAX_KEY_FILE} bytes")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise KeyFileError(f"key file {path}: not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise KeyFileError(f"key file {path}: not a JSON object")
    return doc


def _unseal(path: Path, enc: dict[str, Any], passphrase: bytes | None) -> bytes:
    if passphrase is None:
        raise KeyFileError(f"key file {path}: is passphrase-protected, no passphrase given")
    try:
        ops, mem = int(enc["opslimit"]), int(enc["memlimit"])
        salt = base64.b64decode(enc["salt"], validate=True)
        sealed = base64.b64decode(enc["box"], validate=True)
    except (KeyError, TypeError, ValueError) as e:
        raise KeyFileError(f"key file {path}: malformed 'encrypted' section") from e
    if enc.get("kdf") != "argon2id" or not (0 < ops <= _KDF_MAX_OPS and 0 < mem <= _KDF_MAX_MEM):
        raise KeyFileError(f"key file {path}: unsupported or excessive KDF parameters")
    try:
        return bytes(nacl.secret.SecretBox(_kdf(passphrase, salt, ops, mem)).decrypt(sealed))
    except nacl.exceptions.CryptoError as e:
        raise KeyFileError(f"key file {path}: wrong passphrase or damaged key") from e


def read_private_key(path: Path, passphrase: bytes | None = None) -> nacl.signing.SigningKey:
    """Load a private key file; refuse group/other-readable files and wrong passphrases."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise KeyFileError(f"key file {path}: cannot read ({e.strerror})") from e
    if mode & 0o077:
        raise KeyFileError(f"key file {path}: mode {mode & 0o777:o} is too open, use 0600")
    doc = _read_json(path)
    if doc.get("format") != PRIVATE_FORMAT:
        raise KeyFileError(f"key file {path}: not a wasmgate private key")
    if isinstance(doc.get("encrypted"), dict):
        seed = _unseal(path, doc["encrypted"], passphrase)
    else:
        try:
            seed = base64.b64decode(str(doc["seed"]), validate=True)
        except (KeyError, ValueError) as e:
            raise KeyFileError(f"key file {path}: missing or malformed seed") from e
    if len(seed) != 32:
        raise KeyFileError(f"key file {path}: seed has {len(seed)} bytes, expected 32")
    key = nacl.signing.SigningKey(seed)
    if doc.get("key_id") not in (None, key_id_of(key.verify_key)):
        raise KeyFileError(f"key file {path}: key_id does not match the key")
    return key


def load_public_key(arg: str) -> nacl.signing.VerifyKey:
    """Load a public key from a public/private key file path, or from its base64 text."""
    path = Path(arg)
    if not path.is_file():
        return decode_public(arg)
    doc = _read_json(path)
    if doc.get("format") not in (PUBLIC_FORMAT, PRIVATE_FORMAT) or "public" not in doc:
        raise KeyFileError(f"key file {path}: not a wasmgate key file")
    public = decode_public(str(doc["public"]))
    if doc.get("key_id") not in (None, key_id_of(public)):
        raise KeyFileError(f"key file {path}: key_id does not match the public key")
    return public

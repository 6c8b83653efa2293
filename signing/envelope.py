"""DSSE-style signature envelopes with domain separation, and strict JSON parsing.

Invariants:
- What is signed is ``PAE(payload_type, payload)`` =
  ``b"DSSEv1 %d %s %d %s" % (len(type), type, len(payload), payload)`` over the *exact*
  payload bytes: no JSON canonicalisation, and a bundle-manifest signature can never verify
  as a trust-file or fleet-document signature (or the reverse): the payload types differ.
- A key counts at most once towards a threshold, however often its signature appears.
- JSON read here refuses duplicate keys, NaN/Infinity, and non-object top levels.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import nacl.exceptions
import nacl.signing
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wasmgate.signing.keys import key_id_of

BUNDLE_PAYLOAD_TYPE = "application/vnd.wasmgate.bundle-manifest+json"
TRUST_PAYLOAD_TYPE = "application/vnd.wasmgate.trust+json"
FLEET_PAYLOAD_TYPE = "application/vnd.wasmgate.fleet+json"
MAX_SIGNATURES = 16
HEX64 = r"^[0-9a-f]{64}$"


class EnvelopeFormatError(ValueError):
    """Raised by the parsers here; callers re-raise as their own error type."""


def _no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise EnvelopeFormatError(f"duplicate JSON key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise EnvelopeFormatError(f"JSON constant {name} is not allowed")


def loads_strict(data: bytes) -> dict[str, Any]:
    """Parse a JSON object, refusing duplicate keys, NaN/Infinity and invalid UTF-8."""
    try:
        text = data.decode("utf-8")
        obj = json.loads(text, object_pairs_hook=_no_dupes, parse_constant=_no_constant)
    except EnvelopeFormatError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise EnvelopeFormatError(f"not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise EnvelopeFormatError("top level is not a JSON object")
    return obj


def first_error(e: ValidationError, whole: str = "document") -> str:
    """``where: what`` of a validation error's first problem (``whole`` when at the top)."""
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or whole
    return f"{where}: {first['msg']}"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding of ``payload`` under ``payload_type``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


class Signature(BaseModel):
    """One signature: the signer's key id and the base64 64-byte Ed25519 signature."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    key_id: str = Field(pattern=HEX64)
    sig: str = Field(max_length=128)

    def raw(self) -> bytes:
        """The decoded signature bytes (empty if not valid base64)."""
        try:
            return base64.b64decode(self.sig, validate=True)
        except (binascii.Error, ValueError):
            return b""


class Envelope(BaseModel):
    """A signature envelope; ``payload`` (base64) is absent when the payload is detached."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    payload_type: str = Field(max_length=200)
    payload: str | None = None
    signatures: list[Signature] = Field(max_length=MAX_SIGNATURES)

    def payload_bytes(self) -> bytes:
        """The embedded payload, decoded; :class:`EnvelopeFormatError` if absent or bad."""
        if self.payload is None:
            raise EnvelopeFormatError("envelope has no embedded payload")
        try:
            return base64.b64decode(self.payload, validate=True)
        except (binascii.Error, ValueError) as e:
            raise EnvelopeFormatError("payload is not base64") from e

    def to_json(self) -> bytes:
        """Serialise the envelope (fields with value None are left out)."""
        return self.model_dump_json(exclude_none=True, indent=2).encode() + b"\n"


def parse_envelope(data: bytes) -> Envelope:
    """Parse envelope JSON strictly; :class:`EnvelopeFormatError` says what is wrong."""
    obj = loads_strict(data)
    try:
        return Envelope.model_validate(obj)
    except ValidationError as e:
        raise EnvelopeFormatError(f"signature envelope: {first_error(e)}") from e


def sign(key: nacl.signing.SigningKey, payload_type: str, payload: bytes) -> Signature:
    """Sign ``payload`` under ``payload_type`` with ``key``."""
    sig = key.sign(pae(payload_type, payload)).signature
    return Signature(key_id=key_id_of(key.verify_key), sig=base64.b64encode(sig).decode())


def verify_signature(
    public: nacl.signing.VerifyKey, payload_type: str, payload: bytes, sig: Signature
) -> bool:
    """True iff ``sig`` is ``public``'s valid signature over ``PAE(payload_type, payload)``."""
    if sig.key_id != key_id_of(public):
        return False
    try:
        public.verify(pae(payload_type, payload), sig.raw())
    except (nacl.exceptions.CryptoError, ValueError):
        return False
    return True


def count_valid(
    keys: dict[str, nacl.signing.VerifyKey], payload_type: str, payload: bytes, env: Envelope
) -> set[str]:
    """Key ids among ``keys`` with a valid signature in ``env`` (each key counted once)."""
    good: set[str] = set()
    for s in env.signatures:
        public = keys.get(s.key_id)
        if (
            public is not None
            and s.key_id not in good
            and verify_signature(public, payload_type, payload, s)
        ):
            good.add(s.key_id)
    return good

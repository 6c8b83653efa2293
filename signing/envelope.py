"""DSSE-style signature envelopes with domain separation, and strict JSON parsing.

Invariants:
- What is signed is ``PAE(payload_type, payload)`` =
  ``b"DSSEv1 %d %s %d %s" % (len(type), type, len(payload), payload)`` over the *exact*
  payload bytes: no JSON canonicalisation, and a bundle-manifest signature can never verify
  as a trust-file or fleet-document signature (or the reverse): the payload types differ.
- A key counts at most once towards a threshold, however often its signature appears.
- JSON read here refuses duplicate keys, NaN/Infinity, lone surrogates (``"\\ud800"``: not
  text, and no encoder could write them back) and non-object top levels.
- Patterns end in ``\\Z``, never ``$``: ``re`` (which msgspec uses) lets ``$`` match before a
  trailing newline, so ``"<64 hex>\\n"`` would pass as a key id.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Annotated, Any

import msgspec
import nacl.exceptions
import nacl.signing

from wasmgate.signing.keys import key_id_of
from wasmgate.typed import Document, Invalid, convert, plain

BUNDLE_PAYLOAD_TYPE = "application/vnd.wasmgate.bundle-manifest+json"
TRUST_PAYLOAD_TYPE = "application/vnd.wasmgate.trust+json"
FLEET_PAYLOAD_TYPE = "application/vnd.wasmgate.fleet+json"
MAX_SIGNATURES = 16
HEX64 = r"^[0-9a-f]{64}\Z"
KeyId = Annotated[str, msgspec.Meta(pattern=HEX64)]
"""A key id or a digest: 64 lowercase hex digits."""
Instant = Annotated[datetime, msgspec.Meta(tz=True)]
"""A datetime with its offset (RFC 3339 in JSON); a naive one is refused."""


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


# Only a \u escape can put a surrogate into the parsed text (the bytes were strict UTF-8).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def loads_strict(data: bytes) -> dict[str, Any]:
    """Parse a JSON object, refusing duplicate keys, NaN/Infinity, invalid UTF-8 and lone
    surrogates."""
    try:
        text = data.decode("utf-8")
        obj = json.loads(text, object_pairs_hook=_no_dupes, parse_constant=_no_constant)
        if _SURROGATE_ESCAPE.search(text):
            # json.loads joins a valid pair into one character; what is left is unpaired.
            # pydantic's parser refused these; a manifest holding one could not be written
            # back out (records, the status API) without an encoding error.
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except EnvelopeFormatError:
        raise
    except UnicodeEncodeError as e:
        raise EnvelopeFormatError("not valid JSON: a string holds a lone surrogate") from e
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise EnvelopeFormatError(f"not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise EnvelopeFormatError("top level is not a JSON object")
    return obj


def to_json(doc: msgspec.Struct) -> bytes:
    """``doc`` as indented JSON, None fields left out: the bytes that documents are signed as.

    The layout pydantic's ``model_dump_json(indent=2, exclude_none=True)`` wrote (UTF-8 as
    is, not ``\\u`` escapes), so files signed now look like those signed before. Signatures
    cover the written bytes, never a re-encoding, so the layout is not part of any check."""
    return json.dumps(plain(doc, omit_none=True), indent=2, ensure_ascii=False).encode() + b"\n"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding of ``payload`` under ``payload_type``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


class Signature(Document, kw_only=True):
    """One signature: the signer's key id and the base64 64-byte Ed25519 signature."""

    key_id: KeyId
    sig: Annotated[str, msgspec.Meta(max_length=128)]

    def raw(self) -> bytes:
        """The decoded signature bytes (empty if not valid base64)."""
        try:
            return base64.b64decode(self.sig, validate=True)
        except (binascii.Error, ValueError):
            return b""


class Envelope(Document, kw_only=True):
    """A signature envelope; ``payload`` (base64) is absent when the payload is detached."""

    payload_type: Annotated[str, msgspec.Meta(max_length=200)]
    payload: str | None = None
    signatures: Annotated[list[Signature], msgspec.Meta(max_length=MAX_SIGNATURES)]

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
        return to_json(self)


def parse_envelope(data: bytes) -> Envelope:
    """Parse envelope JSON strictly; :class:`EnvelopeFormatError` says what is wrong."""
    return envelope_of(loads_strict(data))


def envelope_of(obj: dict[str, Any]) -> Envelope:
    """An envelope from parsed JSON (:func:`loads_strict`); :class:`EnvelopeFormatError`."""
    try:
        return convert(obj, Envelope)
    except Invalid as e:
        raise EnvelopeFormatError(f"signature envelope: {e}") from e


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

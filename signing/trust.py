"""The trust store: which keys may sign which bundle names, revocations, root rotation.

A trust file is JSON, in one of two forms:
- a plain :class:`TrustDoc` (``"format": "wasmgate-trust/1"``, no ``root``), edited by
  ``wasmgate trust add|revoke`` on the gateway itself;
- a signed envelope ``{"payload_type": TRUST_PAYLOAD_TYPE, "payload": base64(TrustDoc),
  "signatures": [...]}`` whose TrustDoc has a ``root`` section (k-of-n root keys).

Invariants:
- A signer may sign only bundles whose every reachable name (bundle name, routes, models,
  event topic; see ``scope.py``) matches one of its ``names`` patterns (fnmatch,
  case-sensitive), and only limits at or below its ``max_limits`` ceilings.
- Revoked key ids never verify; revoked manifest digests never install.
- A signed trust file needs valid signatures of ``threshold`` distinct keys of its own
  root. With a pin directory, the last accepted signed file is pinned; a new one must have
  version exactly pinned+1 and be signed by a threshold of the *pinned* root keys and of
  its own root keys (TUF's rotation rule). Lower versions, skipped versions, unsigned
  replacements of a signed file and expired signed files are refused.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import nacl.signing

from wasmgate._compat import UTC
from wasmgate.signing.envelope import (
    TRUST_PAYLOAD_TYPE,
    Envelope,
    EnvelopeFormatError,
    envelope_of,
    loads_strict,
)
from wasmgate.signing.errors import (
    LimitCeilingError,
    RevokedBundleError,
    RevokedKeyError,
    TrustExpiredError,
    TrustFileError,
    TrustRollbackError,
    TrustSignatureError,
    UntrustedKeyError,
)
from wasmgate.signing.keys import decode_public, encode_public, key_id_of
from wasmgate.signing.manifest import Manifest
from wasmgate.signing.scope import check_scope
from wasmgate.signing.state import atomic_write
from wasmgate.signing.trustdoc import FleetSection, TrustDoc, parse_doc, verify_threshold
from wasmgate.typed import Invalid, convert, plain

PIN_FILE = "trust.pinned.json"
ROLE_USES = {"root": "trust files", "fleet": "fleet documents", "signer": "bundles"}
"""What a key of each role signs (`TrustStore.role_of`), for the texts that name a role."""
MAX_TRUST_BYTES = 1024 * 1024


class TrustStore:
    """An immutable, validated trust store; ``with_*`` methods return modified copies."""

    def __init__(self, doc: TrustDoc, envelope: Envelope | None = None) -> None:
        """Wrap a validated document (and, for signed files, the verified envelope)."""
        self.doc = doc
        self.envelope = envelope

    @classmethod
    def empty(cls) -> TrustStore:
        """A store that trusts nothing."""
        return cls(TrustDoc())

    @property
    def signed(self) -> bool:
        """True for a root-signed trust file."""
        return self.envelope is not None

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> TrustStore:
        """Parse a trust file; a signed one must carry its own root's threshold."""
        if len(data) > MAX_TRUST_BYTES:
            raise TrustFileError(f"trust file {source}: larger than {MAX_TRUST_BYTES} bytes")
        try:
            obj = loads_strict(data)
            if "payload_type" not in obj:
                return cls(parse_doc(data, source))
            env = envelope_of(obj)
            payload = env.payload_bytes()
        except EnvelopeFormatError as e:
            raise TrustFileError(f"trust file {source}: {e}") from e
        if env.payload_type != TRUST_PAYLOAD_TYPE:
            raise TrustFileError(f"trust file {source}: payload type {env.payload_type!r}")
        doc = parse_doc(payload, source)
        if doc.root is None:
            raise TrustFileError(f"trust file {source}: signed but has no root section")
        verify_threshold(payload, env, doc.root_keys(), doc.root.threshold, source)
        return cls(doc, env)

    @classmethod
    def load(
        cls, path: Path, *, pin_dir: Path | None = None, missing_ok: bool = False
    ) -> TrustStore:
        """Load ``path``; with ``pin_dir`` apply the rotation rule against the pinned file."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if missing_ok:
                return cls.empty()
            raise TrustFileError(f"trust file {path}: does not exist") from None
        except OSError as e:
            raise TrustFileError(f"trust file {path}: cannot read ({e.strerror})") from e
        store = cls.from_bytes(data, str(path))
        store.check_expiry(str(path))
        if pin_dir is not None:
            store.check_against_pin(pin_dir, data, str(path))
        return store

    def check_expiry(self, source: str, now: datetime | None = None) -> None:
        """Raise :class:`TrustExpiredError` if the document has expired."""
        now = now or datetime.now(UTC)
        if self.doc.expires is not None and self.doc.expires <= now:
            raise TrustExpiredError(f"trust file {source}: expired at {self.doc.expires}")

    def check_against_pin(self, pin_dir: Path, data: bytes, source: str) -> None:
        """The rotation rule against the copy pinned in ``pin_dir`` (pinned on first sight)."""
        pin_path = pin_dir / PIN_FILE
        try:
            pinned = TrustStore.from_bytes(pin_path.read_bytes(), str(pin_path))
        except FileNotFoundError:
            pinned = None
        if pinned is None:
            if self.signed:
                atomic_write(pin_path, data)
            return
        if not self.signed:
            raise TrustSignatureError(
                f"trust file {source}: unsigned, but a root-signed trust file "
                f"(version {pinned.doc.version}) is pinned"
            )
        if pinned.rotate_to(self, source) is not pinned:
            atomic_write(pin_path, data)

    def rotate_to(self, new: TrustStore, source: str) -> TrustStore:
        """Accept ``new`` as the successor of this signed store (TUF rotation rule)."""
        old_v, new_v = self.doc.version, new.doc.version
        if new.envelope is None or self.envelope is None or self.doc.root is None:
            raise TrustSignatureError(f"trust file {source}: rotation needs signed files")
        if new_v == old_v and new.doc == self.doc:
            return self
        if new_v <= old_v:
            raise TrustRollbackError(f"trust file {source}: version {new_v} <= pinned {old_v}")
        if new_v != old_v + 1:
            raise TrustRollbackError(
                f"trust file {source}: version {new_v} skips versions after pinned {old_v}"
            )
        verify_threshold(
            new.envelope.payload_bytes(),
            new.envelope,
            self.doc.root_keys(),
            self.doc.root.threshold,
            f"trust file {source} (rotation from version {old_v})",
        )
        return new

    # --- checks used during bundle verification ------------------------------------------

    def signer_key(self, bundle: str, key_id: str) -> nacl.signing.VerifyKey:
        """The public key of trusted, unrevoked signer ``key_id``."""
        if key_id in self.doc.revoked.keys:
            raise RevokedKeyError(bundle, f"signing key {key_id} is revoked")
        entry = self.doc.signers.get(key_id)
        if entry is None:
            raise UntrustedKeyError(bundle, self.not_a_signer(key_id))
        return decode_public(entry.public)

    def not_a_signer(self, key_id: str) -> str:
        """Why ``key_id`` may not sign a bundle: a key held in another role is named as such
        (an operator who signed with the fleet key must read that, not "not trusted")."""
        role = self.role_of(key_id)
        if role is None:
            return f"signing key {key_id} is not trusted"
        return (
            f"signing key {key_id} is trusted for {ROLE_USES[role]}, not for bundles "
            f"(its role here is {role}; a bundle needs a key of the signer role: "
            "`wasmgate trust add KEY.pub --names PATTERN`)"
        )

    def describe_key(self, key_id: str) -> str:
        """``key_id``'s role here in a few words: ``"a signer key (it signs bundles)"``."""
        role = self.role_of(key_id)
        if key_id in self.doc.revoked.keys:
            return f"revoked (it was {'a ' + role if role else 'in no role'} key)"
        if role is None:
            return "in no role of this trust file"
        return f"a {role} key (it signs {ROLE_USES[role]})"

    def check_manifest(self, manifest: Manifest, key_id: str, digest: str) -> None:
        """Scope (every claimed name), limit ceilings and bundle revocation of a manifest."""
        label = manifest.label()
        entry = self.doc.signers[key_id]
        check_scope(manifest, key_id, entry.names)
        for limit, ceiling in entry.max_limits.items():
            value = getattr(manifest.limits, limit)
            if value is None or value > ceiling:
                raise LimitCeilingError(
                    label, f"limits.{limit} = {value} exceeds key {key_id[:16]}'s ceiling {ceiling}"
                )
        if digest in self.doc.revoked.bundles:
            raise RevokedBundleError(label, f"manifest digest {digest} is revoked")

    # --- the fleet role (signed desired state, ``fleetdoc.py``) ---------------------------

    def fleet_role(self) -> FleetSection | None:
        """The ``fleet`` section, honoured only in a root-signed trust file (else None)."""
        return self.doc.fleet if self.signed else None

    def fleet_keys(self) -> dict[str, nacl.signing.VerifyKey]:
        """The unrevoked keys of the honoured fleet role by key id (empty without one)."""
        role = self.fleet_role()
        keys = role.keys.items() if role else ()
        return {k: decode_public(v) for k, v in keys if k not in self.doc.revoked.keys}

    # --- editing (unsigned trust files only) ---------------------------------------------

    def _edited(self, **update: object) -> TrustStore:
        if self.signed:
            raise TrustFileError("a root-signed trust file cannot be edited here; re-sign it")
        # Through JSON values and a strict convert, as a file read back would be: an edit is
        # held to every rule of the schema (patterns, bounds, key ids, cross-field checks).
        data = plain(self.doc) | update | {"version": self.doc.version + 1}
        try:
            return TrustStore(convert(data, TrustDoc))
        except Invalid as e:
            raise TrustFileError(f"trust edit refused: {e}") from e

    def with_signer(
        self,
        public: nacl.signing.VerifyKey,
        names: list[str],
        max_limits: dict[str, int],
        comment: str = "",
    ) -> TrustStore:
        """A copy that trusts ``public`` for ``names`` (replacing an entry of the same key)."""
        entry = {"public": encode_public(public), "names": names, "max_limits": max_limits}
        entry |= {"comment": comment} if comment else {}
        signers = plain(self.doc.signers) | {key_id_of(public): entry}
        return self._edited(signers=signers)

    def with_fleet_key(
        self, public: nacl.signing.VerifyKey, names: list[str], threshold: int | None = None
    ) -> TrustStore:
        """A copy whose fleet role also holds ``public`` and also allows ``names``.

        The names are the role's (one list for all its keys, like the root threshold); the
        threshold is ``threshold`` when given, else kept (1 for a new role). Only a trust
        document with a ``root`` section (a draft for ``trust sign``) accepts a fleet role.
        """
        if self.doc.root is None:
            raise TrustFileError(
                "the fleet role is accepted only in a root-signed trust file: add the root "
                "keys first (`wasmgate trust add ROOT.pub --role root`), then sign the draft "
                "with `wasmgate trust sign`"
            )
        fleet = plain(self.doc.fleet) or {"keys": {}, "names": []}
        fleet["keys"] |= {key_id_of(public): encode_public(public)}
        fleet["names"] += [n for n in names if n not in fleet["names"]]
        fleet |= {"threshold": threshold} if threshold is not None else {}
        return self._edited(fleet=fleet)

    def with_root_key(self, public: nacl.signing.VerifyKey, threshold: int | None) -> TrustStore:
        """A draft whose root section also holds ``public``; the threshold is ``threshold``
        when given, else kept (1 for a new section). The draft is for ``trust sign``: an
        unsigned file's root section trusts nothing until the root keys sign it."""
        kid = key_id_of(public)
        root = plain(self.doc.root) or {"keys": {}, "threshold": 1}
        if kid in root["keys"]:
            raise TrustFileError(f"key {kid} is already a root key of this trust document")
        root["keys"] |= {kid: encode_public(public)}
        root |= {"threshold": threshold} if threshold is not None else {}
        return self._edited(root=root)

    def role_of(self, key_id: str) -> str | None:
        """``root``, ``fleet`` or ``signer``: the role ``key_id`` holds here (None if none)."""
        doc = self.doc
        if doc.root is not None and key_id in doc.root.keys:
            return "root"
        if doc.fleet is not None and key_id in doc.fleet.keys:
            return "fleet"
        return "signer" if key_id in doc.signers else None

    def with_revoked(self, *, key_id: str | None = None, digest: str | None = None) -> TrustStore:
        """A copy with ``key_id`` and/or bundle manifest ``digest`` revoked."""
        revoked = plain(self.doc.revoked)
        if key_id is not None and key_id not in revoked["keys"]:
            revoked["keys"].append(key_id)
        if digest is not None and digest not in revoked["bundles"]:
            revoked["bundles"].append(digest)
        return self._edited(revoked=revoked)

    def save(self, path: Path) -> None:
        """Write the (unsigned) trust file atomically."""
        if self.signed:
            raise TrustFileError(f"trust file {path}: root-signed files are written by signing")
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0644: it holds public keys only, and the daemon may run as another user than the
        # one editing it (the unit's DynamicUser reads /etc/wasmgate/trust.json).
        atomic_write(path, self.doc.to_json(), 0o644)

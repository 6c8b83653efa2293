"""Every refusal of ``wasmgate.signing`` is its own exception type.

Invariants:
- Every error derives from :class:`SigningError`; callers map them at the edge (HTTP, CLI).
- Messages name the subject (bundle, file, key or state file) and the reason, on one line.
- Bundle errors carry ``.bundle`` (a file name or ``name@version``) so logs can group them.
"""

from __future__ import annotations


class SigningError(Exception):
    """Base of every error raised by ``wasmgate.signing``."""


# --- keys -------------------------------------------------------------------------------


class KeyFileError(SigningError):
    """A key file is unreadable, malformed, or its passphrase is wrong."""


class KeyExistsError(KeyFileError):
    """Refusing to overwrite an existing key file."""


# --- bundles ------------------------------------------------------------------------------


class BundleError(SigningError):
    """A bundle was refused; ``bundle`` names it, the message says why."""

    def __init__(self, bundle: str, reason: str) -> None:
        super().__init__(f"bundle {bundle}: {reason}")
        self.bundle = bundle
        self.reason = reason


class BundleTooLargeError(BundleError):
    """The bundle (or its manifest/signature, or the sum of its files) exceeds a size cap."""


class MalformedArchiveError(BundleError):
    """The file is not a well-formed ``.wgb`` archive (empty, random bytes, bad header)."""


class TruncatedArchiveError(MalformedArchiveError):
    """The archive ends before a member's declared data or before the end marker."""


class UnsafeMemberError(BundleError):
    """A member is not a plain regular file with a plain name (``../``, ``/abs``, link, device)."""


class DuplicateMemberError(BundleError):
    """Two archive members have the same name."""


class OversizeMemberError(BundleError):
    """A member declares a size beyond the bundle's size cap."""


class UnlistedFileError(BundleError):
    """The archive holds a file that the signed manifest does not list."""


class MissingFileError(BundleError):
    """The manifest lists a file that the archive does not hold."""


class FileSizeError(BundleError):
    """A member's size differs from the size the manifest declares."""


class FileHashError(BundleError):
    """A member's SHA-256 differs from the hash the manifest declares."""


class ManifestError(BundleError):
    """The manifest (or signature envelope) does not match the schema."""


class SignatureError(BundleError):
    """Base of the signature refusals."""


class BadSignatureError(SignatureError):
    """The signature does not verify over the manifest bytes."""


class UntrustedKeyError(SignatureError):
    """The signing key is not in the trust store."""


class RevokedKeyError(SignatureError):
    """The signing key has been revoked."""


class KeyScopeError(SignatureError):
    """The signing key may not sign bundles of this name."""


class RevokedBundleError(BundleError):
    """This exact bundle (manifest digest) has been revoked."""


class LimitCeilingError(BundleError):
    """The manifest asks for more than its signer's limit ceiling allows."""


class ExpiredError(BundleError):
    """The manifest's ``expires`` is not after max(now, clock floor)."""


class FutureIssuedError(BundleError):
    """The manifest's ``issued_at`` lies in the future beyond the allowed clock skew."""


class RollbackError(BundleError):
    """The version is lower than the highest installed version of this name."""


class FleetDowngradeError(RollbackError):
    """A fleet install of a lower version that no signed ``Downgrade`` of its document permits.

    A :class:`RollbackError`, so every caller that handles rollbacks handles it; the name
    says that the fleet asked for it (only installs that carry a fleet document's
    permissions raise it; a local install of an old file stays a plain rollback).
    """


class VersionConflictError(BundleError):
    """Same name and version as an installed bundle, but different content."""


# --- trust store ----------------------------------------------------------------------------


class TrustError(SigningError):
    """Base of trust-store refusals."""


class TrustFileError(TrustError):
    """The trust file is unreadable or does not match the schema."""


class TrustSignatureError(TrustError):
    """A root-signed trust file lacks a threshold of valid root signatures."""


class TrustRollbackError(TrustError):
    """A trust file is older than the pinned one, or skips a version."""


class TrustExpiredError(TrustError):
    """A root-signed trust file has expired."""


# --- fleet documents (signed desired state, ``fleetdoc.py``) ----------------------------


class FleetDocError(SigningError):
    """Base of the refusals of a signed fleet document; the document changes nothing."""


class FleetFormatError(FleetDocError):
    """Not a fleet document: bad JSON (duplicate keys, NaN, too big or deep) or schema."""


class FleetSignatureError(FleetDocError):
    """Fewer than the fleet role's threshold of valid signatures by fleet keys."""


class FleetReplayError(FleetDocError):
    """The serial is not above the last applied one (a replayed or reordered document)."""


class FleetExpiredError(FleetDocError):
    """The document's ``expires`` is not after now."""


class FleetScopeError(FleetDocError):
    """A bundle or downgrade name lies outside the fleet role's ``names`` patterns."""


# --- state and blobs -----------------------------------------------------------------------


class StoreIOError(SigningError):
    """The store's directory could not be read or written (disk full, permissions)."""


class StateCorruptedError(SigningError):
    """The anti-rollback state is unreadable; refusing rather than resetting version floors."""


class BlobNotFoundError(SigningError):
    """No blob with this SHA-256 in the store."""


class NotStagedError(SigningError):
    """Promote or abort of a name that has no staged candidate."""


class BlobIntegrityError(SigningError):
    """A stored blob no longer hashes to its name."""

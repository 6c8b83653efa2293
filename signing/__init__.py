"""wasmgate.signing: signed bundles, keys, the trust store and anti-rollback state.

Invariants (details in each module's docstring):
- Bundles are verified in one fixed order: size caps, signature by a trusted, unrevoked,
  name-scoped key, manifest schema and ceilings, expiry, anti-rollback version, every
  file's size and SHA-256, nothing unlisted or missing.
- Nothing from a manifest is parsed before its signature verifies; signatures are
  domain-separated (DSSE PAE) so bundle and trust signatures cannot be swapped.
- Installed files live in a content-addressed blob store; a failed install changes nothing.
- This package imports only PyNaCl, msgspec and the standard library (and `wasmgate.typed`,
  the shared document base).
"""

from typing import TYPE_CHECKING, Any

from wasmgate.signing.archive import ArchiveReader, Member, write_archive
from wasmgate.signing.build import build_bundle, parse_duration
from wasmgate.signing.envelope import (
    BUNDLE_PAYLOAD_TYPE,
    FLEET_PAYLOAD_TYPE,
    TRUST_PAYLOAD_TYPE,
    Envelope,
    Signature,
    pae,
    sign,
    verify_signature,
)
from wasmgate.signing.errors import (
    BadSignatureError,
    BlobIntegrityError,
    BlobNotFoundError,
    BundleError,
    BundleTooLargeError,
    DuplicateMemberError,
    ExpiredError,
    FileHashError,
    FileSizeError,
    FleetDocError,
    FleetDowngradeError,
    FleetExpiredError,
    FleetFormatError,
    FleetReplayError,
    FleetScopeError,
    FleetSignatureError,
    FutureIssuedError,
    KeyExistsError,
    KeyFileError,
    KeyScopeError,
    LimitCeilingError,
    MalformedArchiveError,
    ManifestError,
    MissingFileError,
    NotStagedError,
    OversizeMemberError,
    RevokedBundleError,
    RevokedKeyError,
    RollbackError,
    SignatureError,
    SigningError,
    StateCorruptedError,
    StoreIOError,
    TruncatedArchiveError,
    TrustError,
    TrustExpiredError,
    TrustFileError,
    TrustRollbackError,
    TrustSignatureError,
    UnlistedFileError,
    UnsafeMemberError,
    UntrustedKeyError,
    VersionConflictError,
)
from wasmgate.signing.installs import InstalledBundle, StagedInstall
from wasmgate.signing.keys import (
    decode_public,
    encode_public,
    generate_key,
    key_id_of,
    load_public_key,
    read_private_key,
    write_private_key,
    write_public_key,
)
from wasmgate.signing.manifest import (
    AdapterEntry,
    Batching,
    Fallback,
    FileEntry,
    Limits,
    Manifest,
    ModelEntry,
    Release,
    Routes,
    SelfTest,
    Targets,
    TensorSig,
    parse_manifest,
)
from wasmgate.signing.state import StateDoc, StateFile
from wasmgate.signing.store import BundleStore
from wasmgate.signing.trust import TrustStore
from wasmgate.signing.trustdoc import FleetSection, SignerEntry, TrustDoc, sign_trust
from wasmgate.signing.verify import BundleInfo, VerifiedBundle, inspect_bundle, verify_bundle

if TYPE_CHECKING:
    from wasmgate.signing.fleetdoc import (
        DesiredBundle,
        Downgrade,
        FleetDoc,
        Target,
        parse_fleet,
        sign_fleet,
        verify_fleet,
    )

_FLEETDOC = frozenset(
    {"DesiredBundle", "Downgrade", "FleetDoc", "Target"}
    | {"parse_fleet", "sign_fleet", "verify_fleet"}
)


def __getattr__(name: str) -> Any:
    """The fleet document's names, imported on first use: a daemon that is never sent one
    does not build its models (~3-5 ms of every start)."""
    if name in _FLEETDOC:
        from wasmgate.signing import fleetdoc  # noqa: PLC0415

        return getattr(fleetdoc, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUNDLE_PAYLOAD_TYPE",
    "FLEET_PAYLOAD_TYPE",
    "TRUST_PAYLOAD_TYPE",
    "AdapterEntry",
    "ArchiveReader",
    "BadSignatureError",
    "Batching",
    "BlobIntegrityError",
    "BlobNotFoundError",
    "BundleError",
    "BundleInfo",
    "BundleStore",
    "BundleTooLargeError",
    "DesiredBundle",
    "Downgrade",
    "DuplicateMemberError",
    "Envelope",
    "ExpiredError",
    "Fallback",
    "FileEntry",
    "FileHashError",
    "FileSizeError",
    "FleetDoc",
    "FleetDocError",
    "FleetDowngradeError",
    "FleetExpiredError",
    "FleetFormatError",
    "FleetReplayError",
    "FleetScopeError",
    "FleetSection",
    "FleetSignatureError",
    "FutureIssuedError",
    "InstalledBundle",
    "KeyExistsError",
    "KeyFileError",
    "KeyScopeError",
    "LimitCeilingError",
    "Limits",
    "MalformedArchiveError",
    "Manifest",
    "ManifestError",
    "Member",
    "MissingFileError",
    "ModelEntry",
    "NotStagedError",
    "OversizeMemberError",
    "Release",
    "RevokedBundleError",
    "RevokedKeyError",
    "RollbackError",
    "Routes",
    "SelfTest",
    "Signature",
    "SignatureError",
    "SignerEntry",
    "SigningError",
    "StagedInstall",
    "StateCorruptedError",
    "StateDoc",
    "StateFile",
    "StoreIOError",
    "Target",
    "Targets",
    "TensorSig",
    "TruncatedArchiveError",
    "TrustDoc",
    "TrustError",
    "TrustExpiredError",
    "TrustFileError",
    "TrustRollbackError",
    "TrustSignatureError",
    "TrustStore",
    "UnlistedFileError",
    "UnsafeMemberError",
    "UntrustedKeyError",
    "VerifiedBundle",
    "VersionConflictError",
    "build_bundle",
    "decode_public",
    "encode_public",
    "generate_key",
    "inspect_bundle",
    "key_id_of",
    "load_public_key",
    "pae",
    "parse_duration",
    "parse_fleet",
    "parse_manifest",
    "read_private_key",
    "sign",
    "sign_fleet",
    "sign_trust",
    "verify_bundle",
    "verify_fleet",
    "verify_signature",
    "write_archive",
    "write_private_key",
    "write_public_key",
]

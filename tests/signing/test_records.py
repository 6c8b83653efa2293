"""`VerifiedBlob`: the digest a backend keys its derived cache by is computed, never given."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from wasmgate.signing import BlobIntegrityError
from wasmgate.signing.records import VerifiedBlob, verified_blob

DIGEST = "ab" * 32


def test_a_verified_blobs_digest_is_its_bytes_hash_and_cannot_be_chosen() -> None:
    blob = VerifiedBlob(b"model bytes")
    assert blob.sha256 == hashlib.sha256(b"model bytes").hexdigest()
    with pytest.raises(TypeError):
        VerifiedBlob(b"model bytes", DIGEST)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(blob, sha256=DIGEST)
    with pytest.raises(dataclasses.FrozenInstanceError):
        blob.sha256 = DIGEST  # type: ignore[misc]
    assert "model bytes" not in repr(blob)  # a model of many MB stays out of logs


def test_a_blob_that_no_longer_hashes_to_its_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / DIGEST).write_bytes(b"model bytes")
    with pytest.raises(BlobIntegrityError, match="content now hashes to"):
        verified_blob(tmp_path, DIGEST)
    good = hashlib.sha256(b"model bytes").hexdigest()
    (tmp_path / good).write_bytes(b"model bytes")
    assert verified_blob(tmp_path, good).data == b"model bytes"

"""The daemon pins a root-signed trust file and refuses a successor the old roots did not sign."""

from __future__ import annotations

from pathlib import Path

import nacl.signing
import pytest

from wasmgate.runtime.compose.app_service import open_store
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import PathSettings, Settings
from wasmgate.signing import TrustDoc, encode_public, key_id_of, sign_trust
from wasmgate.typed import convert


def _signed(
    version: int, roots: list[nacl.signing.SigningKey], signers: list[nacl.signing.SigningKey]
) -> bytes:
    root = {
        "keys": {key_id_of(k.verify_key): encode_public(k.verify_key) for k in roots},
        "threshold": 1,
    }
    doc = convert({"version": version, "root": root}, TrustDoc)
    return sign_trust(doc, signers)


def test_rotation_not_signed_by_previous_root_is_refused(tmp_path: Path) -> None:
    old, new = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    settings = Settings(paths=PathSettings(data_dir=tmp_path))
    trust_file = settings.paths.resolved_trust_file()
    trust_file.write_bytes(_signed(1, [old], [old]))
    open_store(settings)  # pins version 1
    trust_file.write_bytes(_signed(2, [new], [new]))
    with pytest.raises(ConfigError, match="rotation from version 1"):
        open_store(settings)
    trust_file.write_bytes(_signed(2, [new], [old, new]))
    assert open_store(settings).trust.doc.version == 2

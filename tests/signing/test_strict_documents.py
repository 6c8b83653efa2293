"""The documents stay as strict as they were under pydantic: strict JSON types, unknown
fields refused at every level, offsets required on datetimes, patterns anchored at the very
end, and each refusal naming the field it is about.

msgspec checks these in ``convert`` (``wasmgate.typed``); these tests pin what could have
slipped in the move: ``true`` for ``1``, ``"6"`` for ``6``, ``6.0`` for ``6``, a naive
datetime, an unknown field one level down, ``re``'s ``$`` matching before a trailing newline,
and JSON strings holding a lone surrogate (which pydantic's parser refused).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import nacl.signing
import pytest

from tests.signing.conftest import Kit
from tests.signing.fleetkit import FleetKit, signed_payload
from wasmgate.signing import (
    TRUST_PAYLOAD_TYPE,
    FleetFormatError,
    ManifestError,
    SigningError,
    TrustFileError,
    TrustStore,
    encode_public,
    key_id_of,
    parse_fleet,
    parse_manifest,
    sign_trust,
)
from wasmgate.signing.envelope import EnvelopeFormatError, parse_envelope
from wasmgate.signing.manifest import manifest_from_dict
from wasmgate.signing.trustdoc import TrustDoc
from wasmgate.typed import convert

H = "ab" * 32
Steps = tuple[str | int, ...]
Refused = Callable[[bytes, type[SigningError]], SigningError]


def _set(doc: Any, path: Steps, value: object) -> Any:
    out = copy.deepcopy(doc)
    cur = out
    for step in path[:-1]:
        cur = cur[step]
    cur[path[-1]] = value
    return out


def _refused(exc: type[Exception], where: str) -> AbstractContextManager[Any]:
    """Expect ``exc`` whose message names ``where`` as the place of the problem."""
    return pytest.raises(exc, match=rf"(^|: ){re.escape(where)}: ")


# --- the bundle manifest ---------------------------------------------------------------


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    kit = Kit(tmp_path_factory.mktemp("kit"), nacl.signing.SigningKey.generate())
    return kit.manifest(kit.build(6))


def _parse(doc: dict[str, Any]) -> object:
    return parse_manifest(json.dumps(doc).encode(), "t")


def test_the_base_manifest_parses(manifest: dict[str, Any]) -> None:
    assert _parse(manifest) is not None


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("version",), True, "version"),
        (("version",), "6", "version"),
        (("version",), 6.0, "version"),
        (("limits", "memory_mb"), True, "limits.memory_mb"),
        (("limits", "memory_mb"), "32", "limits.memory_mb"),
        (("fallback", "allowed"), 1, "fallback.allowed"),
        (("models", 0, "batching", "max_batch_size"), False, "models.0.batching.max_batch_size"),
        (("models", 0, "inputs", 0, "shape", 1), "64", "models.0.inputs.0.shape.1"),
        (("description",), 3, "description"),
        (("limits", "surprise"), 1, "limits.surprise"),
        (("models", 0, "batching", "surprise"), 1, "models.0.batching.surprise"),
        (("models", 0, "inputs", 0, "surprise"), 1, "models.0.inputs.0.surprise"),
        (("issued_at",), "2024-01-01T00:00:00", "issued_at"),
        (("expires",), "2030-01-01", "expires"),
        (("name",), "digits\n", "name"),
        (("key_id",), H + "\n", "key_id"),
        (("adapter", "file"), "adapter.wasm\n", "adapter.file"),
        (("routes", "http"), "digits\n", "routes.http"),
        (("min_daemon_version",), "0.1.0\n", "min_daemon_version"),
        (("params", "label"), None, "params[...]"),
        (("release",), {"window_s": 0}, "release.window_s"),
        (("release",), {"min_requests": True}, "release.min_requests"),
    ],
)
def test_manifest_refuses_what_is_not_exactly_its_type(
    manifest: dict[str, Any], path: Steps, value: object, where: str
) -> None:
    with _refused(ManifestError, where):
        _parse(_set(manifest, path, value))


def test_manifest_file_names_and_digests_are_anchored_at_the_end(
    manifest: dict[str, Any],
) -> None:
    files = manifest["files"]
    renamed = {f"{n}\n" if n == "adapter.wasm" else n: e for n, e in files.items()}
    with _refused(ManifestError, "files.(key)"):
        _parse(manifest | {"files": renamed})
    digest = {n: e | {"sha256": e["sha256"] + "\n"} for n, e in files.items()}
    with _refused(ManifestError, "files[...].sha256"):
        _parse(manifest | {"files": digest})


def test_manifest_keeps_each_json_type_and_fills_the_routes(manifest: dict[str, Any]) -> None:
    params = {"i": 3, "f": 3.0, "b": True, "s": "3"}
    doc = {k: v for k, v in manifest.items() if k != "routes"} | {"params": params}
    m = parse_manifest(json.dumps(doc).encode(), "t")
    assert [(k, type(v)) for k, v in m.params.items()] == [
        ("i", int), ("f", float), ("b", bool), ("s", str),
    ]  # fmt: skip
    assert (m.routes.http, m.routes.mqtt) == (m.name, m.name)


def test_manifest_cross_field_checks_still_hold(manifest: dict[str, Any]) -> None:
    with _refused(ManifestError, "manifest"):
        _parse(manifest | {"expires": manifest["issued_at"]})
    with pytest.raises(ManifestError, match=r"not listed in files: other\.wasm"):
        _parse(manifest | {"adapter": {"file": "other.wasm"}})


def test_manifest_strings_with_a_lone_surrogate_are_refused(manifest: dict[str, Any]) -> None:
    text = json.dumps(manifest | {"description": "@"})
    with pytest.raises(ManifestError, match="lone surrogate"):
        parse_manifest(text.replace('"@"', r'"\ud800"').encode(), "t")
    paired = parse_manifest(text.replace('"@"', r'"\ud83d\ude00"').encode(), "t")
    assert paired.description == "\U0001f600"


def test_manifest_from_python_data_wants_an_offset_too(manifest: dict[str, Any]) -> None:
    """The builder passes datetimes, not text: a naive one is refused the same way."""
    with _refused(ManifestError, "issued_at"):
        manifest_from_dict(manifest | {"issued_at": datetime(2024, 1, 1)}, "t")  # noqa: DTZ001


def test_signed_manifest_with_a_bool_version_is_refused(kit: Kit, refused: Refused) -> None:
    data = kit.build(6)
    head = kit.signed_head(kit.manifest(data) | {"version": True})
    err = refused(kit.archive(head + kit.members(data)[2:]), ManifestError)
    assert "version: " in str(err)


# --- the trust document ------------------------------------------------------------------


@pytest.fixture(scope="module")
def trust_doc() -> dict[str, Any]:
    key = nacl.signing.SigningKey.generate().verify_key
    signer = {"public": encode_public(key), "names": ["digits*"], "max_limits": {"fuel": 10}}
    return {
        "version": 1,
        "root": {"keys": {key_id_of(key): encode_public(key)}, "threshold": 1},
        "signers": {key_id_of(key): signer},
        "revoked": {"keys": [], "bundles": []},
    }


def test_the_base_trust_document_parses(trust_doc: dict[str, Any]) -> None:
    assert TrustStore.from_bytes(json.dumps(trust_doc).encode()).doc.version == 1


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("version",), True, "version"),
        (("version",), "2", "version"),
        (("version",), 2.0, "version"),
        (("root", "threshold"), True, "root.threshold"),
        (("signers", 0, "max_limits", "fuel"), True, "signers[...].max_limits[...]"),
        (("signers", 0, "max_limits", "fuel"), "10", "signers[...].max_limits[...]"),
        (("signers", 0, "names", 0), "digits*\n", "signers[...].names.0"),
        (("signers", 0, "surprise"), 1, "signers[...].surprise"),
        (("root", "surprise"), 1, "root.surprise"),
        (("revoked", "surprise"), 1, "revoked.surprise"),
        (("revoked", "keys"), [H + "\n"], "revoked.keys.0"),
        (("expires",), "2030-01-01T00:00:00", "expires"),
    ],
)
def test_trust_document_refuses_what_is_not_exactly_its_type(
    trust_doc: dict[str, Any], path: Steps, value: object, where: str
) -> None:
    if path[0] == "signers":  # the one signer, whatever its key id
        path = ("signers", next(iter(trust_doc["signers"])), *path[2:])
    with _refused(TrustFileError, where):
        TrustStore.from_bytes(json.dumps(_set(trust_doc, path, value)).encode(), "t")


def test_trust_key_ids_are_anchored_at_the_end(trust_doc: dict[str, Any]) -> None:
    signers = {f"{k}\n": v for k, v in trust_doc["signers"].items()}
    with _refused(TrustFileError, "signers.(key)"):
        TrustStore.from_bytes(json.dumps(trust_doc | {"signers": signers}).encode(), "t")


def test_signed_trust_payload_is_parsed_strictly(trust_doc: dict[str, Any]) -> None:
    """Inside a validly root-signed file too: duplicate keys and lone surrogates."""
    root = nacl.signing.SigningKey.generate()
    kid, pub = key_id_of(root.verify_key), encode_public(root.verify_key)
    doc = convert(trust_doc | {"root": {"keys": {kid: pub}, "threshold": 1}}, TrustDoc)
    good = sign_trust(doc, [root])
    assert TrustStore.from_bytes(good).signed
    for payload, why in (
        doc.to_json().replace(b'"version": 1', b'"version": 1, "version": 2'), "duplicate",
    ), (doc.to_json().replace(b'"digits*"', rb'"\udc00"'), "lone surrogate"):  # fmt: skip
        assert payload != doc.to_json()
        with pytest.raises(TrustFileError, match=why):
            TrustStore.from_bytes(signed_payload(payload, [root], TRUST_PAYLOAD_TYPE))


def test_trust_edits_are_held_to_the_schema() -> None:
    key = nacl.signing.SigningKey.generate().verify_key
    with _refused(TrustFileError, "signers[...].names.0"):
        TrustStore.empty().with_signer(key, ["digits\n"], {})
    with _refused(TrustFileError, "signers[...].max_limits[...]"):
        TrustStore.empty().with_signer(key, ["digits"], {"fuel": True})
    with _refused(TrustFileError, "revoked.keys.0"):
        TrustStore.empty().with_revoked(key_id="0" * 63)


# --- the fleet document ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("serial",), True, "serial"),
        (("serial",), "5", "serial"),
        (("bundles", 0, "version"), 6.0, "bundles.0.version"),
        (("bundles", 0, "staged_percent"), True, "bundles.0.staged_percent"),
        (("issued",), "2024-01-01T00:00:00", "issued"),
        (("target", "surprise"), 1, "target.surprise"),
        (("bundles", 0, "surprise"), 1, "bundles.0.surprise"),
        (("target", "group"), "g1\n", "target.group"),
        (("bundles", 0, "name"), "digits\n", "bundles.0.name"),
    ],
)
def test_fleet_document_refuses_what_is_not_exactly_its_type(
    path: Steps, value: object, where: str
) -> None:
    doc = json.loads(FleetKit().doc(5).to_json())
    with _refused(FleetFormatError, where):
        parse_fleet(json.dumps(_set(doc, path, value)).encode())


def test_fleet_refs_are_anchored_at_the_end() -> None:
    doc = json.loads(FleetKit().doc(5).to_json())
    doc["bundles"][0]["ref"] += "\n"
    with _refused(FleetFormatError, "bundles.0.ref"):
        parse_fleet(json.dumps(doc).encode())


# --- the signature envelope --------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"surprise": 1}, "surprise"),
        ({"payload": 3}, "payload"),
        ({"signatures": [{"key_id": H + "\n", "sig": ""}]}, "signatures.0.key_id"),
        ({"signatures": [{"key_id": H, "sig": "", "surprise": 1}]}, "signatures.0.surprise"),
    ],
)
def test_envelope_refuses_what_is_not_exactly_its_type(change: dict[str, Any], where: str) -> None:
    env = {"payload_type": "x", "signatures": []} | change
    with _refused(EnvelopeFormatError, where):
        parse_envelope(json.dumps(env).encode())

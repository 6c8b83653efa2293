"""Fleet documents: each refusal has its own error, and no other signature passes as one."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import nacl.signing
import pytest

from tests.signing.conftest import MAX_BUNDLE, Kit
from tests.signing.fleetkit import REF, FleetKit, signed_payload
from wasmgate.signing import (
    BUNDLE_PAYLOAD_TYPE,
    FLEET_PAYLOAD_TYPE,
    TRUST_PAYLOAD_TYPE,
    BadSignatureError,
    BundleStore,
    FleetDocError,
    FleetExpiredError,
    FleetFormatError,
    FleetReplayError,
    FleetScopeError,
    FleetSignatureError,
    TrustFileError,
    TrustSignatureError,
    TrustStore,
    UntrustedKeyError,
    key_id_of,
    parse_fleet,
    sign_trust,
    verify_fleet,
)
from wasmgate.signing.checks import authenticate
from wasmgate.signing.envelope import parse_envelope
from wasmgate.signing.fleetdoc import MAX_FLEET_BYTES
from wasmgate.typed import replace

NOW = datetime.now(UTC)


@pytest.fixture
def fk() -> FleetKit:
    return FleetKit()


def refused(
    data: bytes, trust: TrustStore, exc: type[FleetDocError], last: int | None = None
) -> str:
    """Verify ``data``; assert exactly ``exc`` and return its message."""
    with pytest.raises(FleetDocError) as info:
        verify_fleet(data, trust, last_serial=last, now=NOW)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    return str(info.value)


def test_signed_document_round_trips(fk: FleetKit) -> None:
    doc = fk.doc(7, {"digits": 6, "digits-b": 2}, gateways=["gw-1", "gw-2"])
    assert verify_fleet(fk.signed(doc), fk.trust(), last_serial=6, now=NOW) == doc
    assert verify_fleet(fk.signed(doc), fk.trust(), last_serial=None, now=NOW) == doc


@pytest.mark.parametrize("last", [7, 8, 2**40])
def test_replayed_equal_or_older_serial(fk: FleetKit, last: int) -> None:
    msg = refused(fk.signed(fk.doc(7)), fk.trust(), FleetReplayError, last)
    assert f"not above the last applied serial {last}" in msg


def test_expired_document(fk: FleetKit) -> None:
    old = fk.doc(3, issued=NOW - timedelta(days=2), expires_in=timedelta(days=1))
    assert "expired at" in refused(fk.signed(old), fk.trust(), FleetExpiredError)
    edge = fk.doc(3, issued=NOW - timedelta(hours=1), expires_in=timedelta(hours=1))
    refused(fk.signed(edge), fk.trust(), FleetExpiredError)  # expires == now: expired


def test_bundle_signer_key_is_not_a_fleet_key(fk: FleetKit) -> None:
    msg = refused(fk.signed(fk.doc(), [fk.signer]), fk.trust(), FleetSignatureError)
    assert "0 valid fleet signature(s), need 1" in msg
    # the role the key has and the one it needs, not only "not fleet keys"
    kid = key_id_of(fk.signer.verify_key)[:16]
    assert f"key {kid} is a signer key (it signs bundles)" in msg
    assert "needs a key of the fleet role" in msg
    assert fk.signed(fk.doc(), [fk.signer]) != fk.signed(fk.doc())


def test_root_key_is_not_a_fleet_key(fk: FleetKit) -> None:
    msg = refused(fk.signed(fk.doc(), [fk.root]), fk.trust(), FleetSignatureError)
    assert "not fleet keys" in msg
    assert "is a root key (it signs trust files)" in msg


def test_a_stranger_and_a_revoked_fleet_key_are_named_as_such(fk: FleetKit) -> None:
    stranger = nacl.signing.SigningKey.generate()
    msg = refused(fk.signed(fk.doc(), [stranger]), fk.trust(), FleetSignatureError)
    assert "is in no role of this trust file" in msg
    revoked = fk.trust(revoked={"keys": [key_id_of(fk.fleet[0].verify_key)], "bundles": []})
    msg = refused(fk.signed(fk.doc(), fk.fleet[:1]), revoked, FleetSignatureError)
    assert "is revoked (it was a fleet key)" in msg


def test_a_bundle_signed_with_the_fleet_key_names_its_role(fk: FleetKit, kit: Kit) -> None:
    """The trust file holds the key only in the fleet role: installing a real bundle signed
    with it says the key is trusted for fleet documents, not for bundles (not "is not
    trusted"); a root key likewise, and only a stranger is "not trusted"."""
    store = BundleStore(kit.root / "state", fk.trust(), max_bundle_bytes=MAX_BUNDLE)
    with pytest.raises(UntrustedKeyError) as info:
        store.install(kit.build(6, key=fk.fleet[0]))
    kid = key_id_of(fk.fleet[0].verify_key)
    msg = str(info.value)
    assert f"signing key {kid} is trusted for fleet documents, not for bundles" in msg
    assert "its role here is fleet" in msg
    assert "is not trusted" not in msg
    with pytest.raises(UntrustedKeyError, match=r"trusted for trust files, not for bundles"):
        fk.trust().signer_key("digits", key_id_of(fk.root.verify_key))
    stranger = key_id_of(nacl.signing.SigningKey.generate().verify_key)
    with pytest.raises(UntrustedKeyError, match=f"signing key {stranger} is not trusted$"):
        fk.trust().signer_key("digits", stranger)


def test_under_threshold_and_one_key_counted_once() -> None:
    fk = FleetKit(n_fleet=3, threshold=2)
    trust = fk.trust()
    refused(fk.signed(fk.doc(), fk.fleet[:1]), trust, FleetSignatureError)
    twice = fk.signed(fk.doc(), [fk.fleet[0], fk.fleet[0]])
    assert "1 valid fleet signature(s), need 2" in refused(twice, trust, FleetSignatureError)
    doc = verify_fleet(fk.signed(fk.doc(), fk.fleet[1:]), trust, last_serial=None, now=NOW)
    assert doc.serial == 1


def test_revoked_fleet_key_does_not_count(fk: FleetKit) -> None:
    kid = key_id_of(fk.fleet[0].verify_key)
    trust = fk.trust(revoked={"keys": [kid]})
    refused(fk.signed(fk.doc(), fk.fleet[:1]), trust, FleetSignatureError)
    doc = verify_fleet(fk.signed(fk.doc(), fk.fleet[1:]), trust, last_serial=None, now=NOW)
    assert doc.serial == 1


def test_tampered_payload_fails_signature(fk: FleetKit) -> None:
    env = json.loads(fk.signed(fk.doc()))
    payload = base64.b64decode(env["payload"]).replace(b'"version": 6', b'"version": 9')
    env["payload"] = base64.b64encode(payload).decode()
    refused(json.dumps(env).encode(), fk.trust(), FleetSignatureError)


def test_bundle_outside_fleet_scope(fk: FleetKit) -> None:
    msg = refused(fk.signed(fk.doc(bundles={"victim": 1})), fk.trust(), FleetScopeError)
    assert "bundles[0] 'victim' is outside the fleet role's names (digits*)" in msg
    mixed = fk.doc(bundles={"digits": 1, "victim-x": 2})
    assert "bundles[1]" in refused(fk.signed(mixed), fk.trust(), FleetScopeError)


def test_downgrade_outside_fleet_scope(fk: FleetKit) -> None:
    doc = fk.doc(bundles={"digits": 6, "victim": 1}, downgrades={"victim": 1})
    assert "downgrades[0] 'victim'" in refused(fk.signed(doc), fk.trust(), FleetScopeError)


def test_fleet_role_only_in_a_root_signed_trust_file(fk: FleetKit) -> None:
    draft = TrustStore.from_bytes(fk.trust_doc().to_json())  # same content, unsigned
    assert not draft.signed
    assert draft.fleet_role() is None
    assert "no fleet role" in refused(fk.signed(fk.doc()), draft, FleetSignatureError)
    no_root = json.loads(fk.trust_doc().to_json())
    del no_root["root"]
    with pytest.raises(TrustFileError, match="fleet role is accepted only in a root-signed"):
        TrustStore.from_bytes(json.dumps(no_root).encode())


def test_fleet_threshold_above_key_count_refused(fk: FleetKit) -> None:
    with pytest.raises(ValueError, match="fleet threshold is larger"):
        FleetKit(n_fleet=1, threshold=2).trust_doc()


# --- no signature crosses between documents --------------------------------------------


def test_trust_file_is_not_a_fleet_document(fk: FleetKit) -> None:
    msg = refused(fk.trust_bytes(), fk.trust(), FleetSignatureError)
    assert "is not 'application/vnd.wasmgate.fleet+json'" in msg


def test_fleet_document_is_not_a_trust_file_or_manifest(fk: FleetKit) -> None:
    data = fk.signed(fk.doc())
    with pytest.raises(TrustFileError, match="payload type"):
        TrustStore.from_bytes(data)
    env = parse_envelope(data)
    detached = replace(env, payload=None).to_json()
    with pytest.raises(BadSignatureError, match="wrong payload type"):
        authenticate(env.payload_bytes(), detached, fk.trust(), "x.wgb")


def test_relabelled_signatures_never_verify() -> None:
    """A key that is root, signer and fleet key at once still cannot move a signature."""
    fk = FleetKit()
    fk.root = fk.signer = fk.fleet[0]
    trust_bytes = fk.trust_bytes()
    as_fleet = json.loads(trust_bytes) | {"payload_type": FLEET_PAYLOAD_TYPE}
    refused(json.dumps(as_fleet).encode(), fk.trust(), FleetSignatureError)
    # the fleet key (also the root key) signs a real trust document, as a fleet document
    fleet_signed = json.loads(signed_payload(fk.trust_doc().to_json(), fk.fleet[:1]))
    with pytest.raises(TrustSignatureError, match="0 valid root signature"):
        TrustStore.from_bytes(
            json.dumps(fleet_signed | {"payload_type": TRUST_PAYLOAD_TYPE}).encode()
        )
    fleet_env = json.loads(fk.signed(fk.doc()))
    as_bundle = fleet_env | {"payload_type": BUNDLE_PAYLOAD_TYPE}
    payload = base64.b64decode(as_bundle.pop("payload"))
    with pytest.raises(BadSignatureError):
        authenticate(payload, json.dumps(as_bundle).encode(), fk.trust(), "x.wgb")


def test_trust_document_signed_as_fleet_is_refused_by_schema(fk: FleetKit) -> None:
    """A validly fleet-signed payload that is a trust document is still not a fleet one."""
    data = signed_payload(fk.trust_doc().to_json(), fk.fleet[:1])
    refused(data, fk.trust(), FleetFormatError)
    with pytest.raises(TrustFileError):
        TrustStore.from_bytes(sign_trust(fk.trust_doc(), [fk.root]).replace(b"trust+", b"fleet+"))


# --- malformed documents (validly signed, so the parser is what refuses them) ----------


def _payload(fk: FleetKit, **change: object) -> bytes:
    obj = json.loads(fk.doc().to_json()) | change
    return json.dumps(obj).encode()


MALFORMED: dict[str, Callable[[FleetKit], bytes]] = {
    "unknown field": lambda fk: _payload(fk, extra=1),
    "missing serial": lambda fk: _payload(fk, serial=None).replace(b'"serial": null, ', b""),
    "serial zero": lambda fk: _payload(fk, serial=0),
    "serial as string": lambda fk: _payload(fk, serial="9"),
    "serial float": lambda fk: _payload(fk, serial=9.0),
    "serial huge": lambda fk: _payload(fk, serial=2**64),
    "serial 1e400": lambda fk: _payload(fk).replace(b'"serial": 1', b'"serial": 1e400'),
    "NaN version": lambda fk: _payload(fk).replace(b'"version": 6', b'"version": NaN'),
    "Infinity serial": lambda fk: _payload(fk).replace(b'"serial": 1', b'"serial": Infinity'),
    "duplicate key": lambda fk: _payload(fk).replace(b'"serial": 1', b'"serial": 1, "serial": 99'),
    "deeply nested": lambda fk: _payload(fk, target=json.loads("[" * 200 + "]" * 200)),
    "too deep for the parser": lambda _: b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "naive datetime": lambda fk: _payload(fk, expires="2099-01-01T00:00:00"),
    "both targets": lambda fk: _payload(fk, target={"group": "g1", "gateways": ["gw"]}),
    "no target": lambda fk: _payload(fk, target={}),
    "group with slash": lambda fk: _payload(fk, target={"group": "g1/#"}),
    "wildcard gateway": lambda fk: _payload(fk, target={"gateways": ["+"]}),
    "gateway twice": lambda fk: _payload(fk, target={"gateways": ["a", "a"]}),
    "ref by tag": lambda fk: _payload(fk, bundles=[{"name": "d", "version": 1, "ref": "h/r:v1"}]),
    "staged 100": lambda fk: _payload(
        fk, bundles=[{"name": "d", "version": 1, "ref": REF, "staged_percent": 100}]
    ),
    "bundle twice": lambda fk: _payload(
        fk, bundles=[{"name": "d", "version": v, "ref": REF} for v in (1, 2)]
    ),
    "downgrade not asked for": lambda fk: _payload(
        fk, downgrades=[{"name": "digits", "version": 5}]
    ),
    "staged downgrade": lambda fk: _payload(
        fk,
        bundles=[{"name": "digits", "version": 5, "ref": REF, "staged_percent": 10}],
        downgrades=[{"name": "digits", "version": 5}],
    ),
    "expires before issued": lambda fk: _payload(fk, expires="2000-01-01T00:00:00Z"),
    "wrong format": lambda fk: _payload(fk, format="wasmgate-fleet/2"),
    "not an object": lambda _: b"[1, 2]",
    "not utf-8": lambda _: b'{"serial": "\xff"}',
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_payload_refused(fk: FleetKit, case: str) -> None:
    data = signed_payload(MALFORMED[case](fk), fk.fleet[:1])
    assert refused(data, fk.trust(), FleetFormatError).startswith("fleet document: ")


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b'{"payload_type": "x", "payload_type": "y"}', b"[]", b'{"a": NaN}'],
)
def test_malformed_envelope_refused(fk: FleetKit, data: bytes) -> None:
    refused(data, fk.trust(), FleetFormatError)


def test_huge_document_refused_before_parsing(fk: FleetKit) -> None:
    huge = b'{"payload_type": "' + b"x" * MAX_FLEET_BYTES + b'"}'
    assert "cap is" in refused(huge, fk.trust(), FleetFormatError)


def test_unsigned_payload_is_never_parsed(fk: FleetKit) -> None:
    """Signature first: garbage without a fleet signature is a signature error, not a parse."""
    refused(signed_payload(b"{" * 10, [fk.signer]), fk.trust(), FleetSignatureError)


def test_doc_round_trips_through_json(fk: FleetKit) -> None:
    doc = fk.doc(5, downgrades={"digits": 6})
    assert parse_fleet(doc.to_json()) == doc
    assert b"staged_percent" not in doc.to_json()

"""`wasmgate trust add --role fleet`, `trust list` roles, `fleet desired sign|publish`.

Real keys on disk, the real CLI entry point, a real mosquitto for ``publish``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.fixtures.mosquitto import Broker
from tests.signing.fleetkit import REF, FleetKit
from wasmgate.runtime.cli import main
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.signing import (
    FleetSignatureError,
    TrustStore,
    encode_public,
    key_id_of,
    verify_fleet,
    write_private_key,
)


@pytest.fixture
def fk() -> FleetKit:
    return FleetKit()


def key_files(fk: FleetKit, tmp_path: Path) -> list[str]:
    paths = []
    for i, key in enumerate(fk.fleet):
        write_private_key(tmp_path / f"fleet{i}.key", key)
        paths.append(str(tmp_path / f"fleet{i}.key"))
    return paths


def draft(fk: FleetKit, tmp_path: Path, *, root: bool = True) -> Path:
    """A trust document to edit: the kit's root and signer, no fleet role yet."""
    doc = json.loads(fk.trust_doc().to_json())
    del doc["fleet"]
    if not root:
        del doc["root"]
    path = tmp_path / "trust-draft.json"
    path.write_text(json.dumps(doc))
    return path


def test_trust_add_fleet_role_then_sign(
    fk: FleetKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = draft(fk, tmp_path)
    pubs = [encode_public(k.verify_key) for k in fk.fleet]
    add = ["trust", "add", "--role", "fleet", "--trust", str(doc)]
    assert main([*add, pubs[0], "--names", "digits*"]) == 0
    assert main([*add, pubs[1], "--names", "vision-*", "--names", "digits*"]) == 0
    fleet = json.loads(doc.read_text())["fleet"]
    assert fleet["names"] == ["digits*", "vision-*"]
    assert fleet["threshold"] == 1
    assert set(fleet["keys"]) == {key_id_of(k.verify_key) for k in fk.fleet}
    write_private_key(tmp_path / "root.key", fk.root)
    out = tmp_path / "trust.json"
    sign = ["trust", "sign", str(doc), "--key", str(tmp_path / "root.key"), "--out", str(out)]
    assert json.loads(doc.read_text())["version"] == 3  # each edit bumped the draft
    assert main([*sign, "--version", "0"]) == 2
    assert main([*sign, "--version", "2"]) == 0
    assert TrustStore.load(out).doc.version == 2
    capsys.readouterr()
    assert main(["trust", "list", "--trust", str(out)]) == 0
    listing = capsys.readouterr().out
    assert ", root 1 of 1, fleet 1 of 2, 1 signer(s)" in listing
    for k in fk.fleet:
        assert f"{key_id_of(k.verify_key)}  fleet   trusted  digits*, vision-*" in listing
    assert f"{key_id_of(fk.signer.verify_key)}  signer  trusted  digits*" in listing
    assert f"{key_id_of(fk.root.verify_key)}  root    trusted" in listing
    assert set(TrustStore.load(out).fleet_keys()) == set(fleet["keys"])


def test_trust_add_fleet_refused_without_root(
    fk: FleetKit, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = draft(fk, tmp_path, root=False)
    before = doc.read_bytes()
    pub = encode_public(fk.fleet[0].verify_key)
    assert main(["trust", "add", pub, "--role", "fleet", "--names", "d*", "--trust", str(doc)]) == 1
    assert "accepted only in a root-signed trust file" in capsys.readouterr().err
    assert doc.read_bytes() == before
    extra = ["--max-limit", "memory_mb=1", "--trust", str(doc)]
    assert main(["trust", "add", pub, "--role", "fleet", "--names", "d*", *extra]) == 2
    signed = tmp_path / "signed.json"
    signed.write_bytes(before := fk.trust_bytes())
    args = ["trust", "add", pub, "--role", "fleet", "--names", "d*", "--trust", str(signed)]
    assert main(args) == 1  # a root-signed file is re-signed, never edited
    assert signed.read_bytes() == before


def sign_args(fk: FleetKit, tmp_path: Path, out: Path, *extra: str) -> list[str]:
    keys = [a for k in key_files(fk, tmp_path) for a in ("--key", k)]
    return ["fleet", "desired", "sign", *keys, "--serial", "42", "--expires", "2d",
            "--out", str(out), *extra]  # fmt: skip


def test_desired_sign_round_trips_through_verify(fk: FleetKit, tmp_path: Path) -> None:
    out = tmp_path / "desired.json"
    args = sign_args(fk, tmp_path, out, "--gateway", "gw-1", "--gateway", "gw-2",
                     "--bundle", f"digits=3@{REF}", "--bundle", f"digits-b=9@{REF}",
                     "--staged", "digits-b=25", "--downgrade", "digits=3")  # fmt: skip
    assert main(args) == 0
    doc = verify_fleet(out.read_bytes(), fk.trust(), last_serial=41, now=datetime.now(UTC))
    assert doc.serial == 42
    assert doc.target.gateways == ["gw-1", "gw-2"]
    assert [(b.name, b.version, b.ref, b.staged_percent) for b in doc.bundles] == [
        ("digits", 3, REF, None), ("digits-b", 9, REF, 25)
    ]  # fmt: skip
    assert [(d.name, d.version) for d in doc.downgrades] == [("digits", 3)]
    assert 47 * 3600 < (doc.expires - doc.issued).total_seconds() <= 48 * 3600
    with pytest.raises(FleetSignatureError):  # both keys signed; threshold 3 is not met
        verify_fleet(
            out.read_bytes(),
            FleetKit(n_fleet=3, threshold=3).trust(),
            last_serial=None,
            now=doc.issued,
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bundle", "digits"], "expected NAME=VERSION@REF"),
        (["--bundle", f"digits=x@{REF}"], "'x' is not a whole number"),
        (["--bundle", "digits=3@127.0.0.1:5000/r:latest"], "bundles.0.ref"),
        (["--bundle", f"digits=3@{REF}", "--bundle", f"digits=4@{REF}"], "given twice"),
        (["--bundle", f"digits=3@{REF}", "--staged", "other=10"], "not among the --bundle"),
        (["--bundle", f"digits=3@{REF}", "--staged", "digits=100"], "staged_percent"),
        (["--bundle", f"digits=3@{REF}", "--downgrade", "digits=2"], "is not among the bundles"),
        (["--bundle", "bad/name=3@" + REF], "bundles.0.name"),
        (["--expires", "soon"], "--expires: invalid duration"),
    ],
)
def test_desired_sign_usage_errors(
    fk: FleetKit,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    out = tmp_path / "desired.json"
    assert main(sign_args(fk, tmp_path, out, "--group", "g1", *extra)) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_desired_sign_refuses_a_bad_group(fk: FleetKit, tmp_path: Path) -> None:
    out = tmp_path / "desired.json"
    assert main(sign_args(fk, tmp_path, out, "--group", "g1/#")) == 2
    assert not out.exists()


def retained(broker: Broker, topic_filter: str) -> dict[str, bytes]:
    """What the broker retains under ``topic_filter`` (a new subscriber's view)."""
    with OperatorClient(BrokerSettings(broker.host, broker.port)) as client:
        return client.collect([topic_filter], 5.0)


def test_desired_publish_retained_then_clear(
    fk: FleetKit, tmp_path: Path, mosquitto: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "desired.json"
    doc.write_bytes(fk.signed(fk.doc(5)))  # target: group g1
    broker = ["--broker", f"{mosquitto.host}:{mosquitto.port}", "--prefix", "site/v1"]
    topic = "site/v1/fleet/g1/desired"
    assert main(["fleet", "desired", "publish", str(doc), *broker, "--group", "g1"]) == 0
    assert f"published serial 5 on {topic}" in capsys.readouterr().out
    assert retained(mosquitto, "site/v1/#") == {topic: doc.read_bytes()}
    assert main(["fleet", "desired", "publish", "--clear", *broker, "--group", "g1"]) == 0
    assert retained(mosquitto, "site/v1/#") == {}


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (["--group", "g2"], "targets group 'g1', not group 'g2'"),
        (["--gateway", "gw-1"], "targets group 'g1', not gateway 'gw-1'"),
        (["--gateway", "+"], "is not a group or gateway id"),
    ],
)
def test_desired_publish_refuses_another_target(
    tmp_path: Path,
    mosquitto: Broker,
    capsys: pytest.CaptureFixture[str],
    target: list[str],
    message: str,
) -> None:
    doc = tmp_path / "desired.json"
    doc.write_bytes((kit := FleetKit()).signed(kit.doc(5)))
    broker = ["--broker", f"{mosquitto.host}:{mosquitto.port}"]
    assert main(["fleet", "desired", "publish", str(doc), *broker, *target]) in (1, 2)
    assert message in capsys.readouterr().err
    assert retained(mosquitto, "#") == {}


def test_desired_publish_gateway_document(fk: FleetKit, tmp_path: Path, mosquitto: Broker) -> None:
    doc = tmp_path / "desired.json"
    doc.write_bytes(fk.signed(fk.doc(6, gateways=["gw-1", "gw-2"])))
    broker = ["--broker", f"{mosquitto.host}:{mosquitto.port}"]
    assert main(["fleet", "desired", "publish", str(doc), *broker, "--gateway", "gw-2"]) == 0
    assert retained(mosquitto, "#") == {"wasmgate/v1/gw-2/desired": doc.read_bytes()}


@pytest.mark.parametrize(
    "content",
    [b"", b"{}", b"not json", FleetKit().trust_bytes()],
    # Named: the trust document's keys are new at each collection, and parallel workers must
    # collect the same ids.
    ids=["empty", "empty-object", "not-json", "a-trust-document"],
)
def test_desired_publish_refuses_what_is_not_a_fleet_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    doc = tmp_path / "desired.json"
    doc.write_bytes(content)
    args = ["fleet", "desired", "publish", str(doc), "--broker", "127.0.0.1:1", "--group", "g1"]
    assert main(args) == 1
    assert "not a signed fleet document" in capsys.readouterr().err

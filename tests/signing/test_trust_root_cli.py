"""`wasmgate trust add ROOT.pub --role root [--threshold K]`: a fleet's trust file from zero
with the CLI alone, and every bad input refused in one line (exit 2) with the draft intact.

Real keys on disk (``wasmgate keygen``), the real CLI entry point, the real trust store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wasmgate.runtime.cli import main
from wasmgate.signing import TrustStore, encode_public, key_id_of, load_public_key


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """root1, root2, signer, fleet: private key files (each with its ``.pub``)."""
    out = {}
    for name in ("root1", "root2", "signer", "fleet"):
        path = tmp_path / f"{name}.key"
        assert main(["keygen", "--out", str(path)]) == 0
        out[name] = path
    return out


def _pub(path: Path) -> str:
    return f"{path}.pub"


def _kid(path: Path) -> str:
    return key_id_of(load_public_key(_pub(path)))


def add(draft: Path, key: str, *extra: str) -> int:
    return main(["trust", "add", key, *extra, "--trust", str(draft)])


def test_a_fleet_trust_file_from_zero(
    keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft, out = tmp_path / "draft.json", tmp_path / "trust.json"
    assert add(draft, _pub(keys["root1"]), "--role", "root") == 0
    assert "as a root key (threshold 1 of 1)" in capsys.readouterr().out
    assert add(draft, _pub(keys["root2"]), "--role", "root", "--threshold", "2") == 0
    assert add(draft, _pub(keys["signer"]), "--names", "my-digits", "--names", "digits-mlp") == 0
    assert add(draft, _pub(keys["fleet"]), "--role", "fleet", "--names", "my-digits") == 0
    root = json.loads(draft.read_text())["root"]
    roots = (keys["root1"], keys["root2"])
    public = {_kid(k): encode_public(load_public_key(_pub(k))) for k in roots}
    assert root == {"keys": public, "threshold": 2}
    # the unsigned draft gives the fleet role no power: only the signed file does
    assert TrustStore.load(draft).fleet_keys() == {}
    sign = ["trust", "sign", str(draft), "--out", str(out), "--key", str(keys["root1"])]
    capsys.readouterr()
    assert main(sign) == 1  # 1 of 2 root keys
    assert "1 valid root signature(s), need 2" in capsys.readouterr().err
    assert not out.exists()
    assert main([*sign, "--key", str(keys["root2"])]) == 0
    store = TrustStore.load(out)
    assert store.signed
    assert set(store.fleet_keys()) == {_kid(keys["fleet"])}
    assert store.doc.signers[_kid(keys["signer"])].names == ["my-digits", "digits-mlp"]


def test_the_fleet_threshold_too(keys: dict[str, Path], tmp_path: Path) -> None:
    draft = tmp_path / "draft.json"
    assert add(draft, _pub(keys["root1"]), "--role", "root") == 0
    assert add(draft, _pub(keys["fleet"]), "--role", "fleet", "--names", "a*") == 0
    assert add(draft, _pub(keys["root2"]), "--role", "fleet", "--names", "a*") == 0
    assert add(draft, _pub(keys["root2"]), "--role", "fleet", "--names", "b*",
               "--threshold", "2") == 0  # fmt: skip
    fleet = json.loads(draft.read_text())["fleet"]
    assert (fleet["threshold"], fleet["names"], len(fleet["keys"])) == (2, ["a*", "b*"], 2)


def _bad_inputs(keys: dict[str, Path], tmp_path: Path) -> list[tuple[list[str], str]]:
    ssh = tmp_path / "id_ed25519.pub"
    ssh.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC2 user@host\n")
    rsa = tmp_path / "rsa.json"
    rsa.write_text(json.dumps({"format": "x509", "public": "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A"}))
    root1, root2 = _pub(keys["root1"]), _pub(keys["root2"])
    return [
        ([root2, "--role", "root", "--threshold", "0"], "--threshold 0: must be at least 1"),
        ([root2, "--role", "root", "--threshold", "3"], "larger than the 2 root key(s)"),
        ([root1, "--role", "root"], "is already a root key"),
        ([str(ssh), "--role", "root"], "not a wasmgate Ed25519 public key"),
        ([str(rsa), "--role", "root"], "not a wasmgate Ed25519 public key"),
        ([str(tmp_path / "missing.pub"), "--role", "root"], "no such key file"),
        ([root2, "--role", "root", "--names", "x"], "--names is not for --role root"),
        ([root2, "--role", "root", "--max-limit", "fuel=1"], "are for signer keys"),
        ([root1, "--names", "x"], "is already a root key: give each role its own key"),
        ([root1, "--role", "fleet", "--names", "x"], "is already a root key"),
        ([_pub(keys["signer"]), "--role", "root"], "is already a signer key"),
        ([_pub(keys["fleet"]), "--role", "fleet"], "--role fleet needs --names"),
        ([_pub(keys["fleet"]), "--names", "x", "--threshold", "1"], "--threshold is for"),
        ([_pub(keys["fleet"]), "--role", "fleet", "--names", "x", "--threshold", "2"],
         "larger than the 1 fleet key(s)"),
    ]  # fmt: skip


def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = tmp_path / "draft.json"
    assert add(draft, _pub(keys["root1"]), "--role", "root") == 0
    assert add(draft, _pub(keys["signer"]), "--names", "my-digits") == 0
    before = draft.read_bytes()
    capsys.readouterr()
    for argv, message in _bad_inputs(keys, tmp_path):
        assert add(draft, *argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err, (argv, err)
        assert len(err.strip().splitlines()) == 1, err
        assert draft.read_bytes() == before, argv


def test_a_root_signed_file_is_never_edited(keys: dict[str, Path], tmp_path: Path) -> None:
    draft, out = tmp_path / "draft.json", tmp_path / "trust.json"
    assert add(draft, _pub(keys["root1"]), "--role", "root") == 0
    assert main(["trust", "sign", str(draft), "--key", str(keys["root1"]), "--out", str(out)]) == 0
    before = out.read_bytes()
    assert add(out, _pub(keys["root2"]), "--role", "root") == 1
    assert out.read_bytes() == before

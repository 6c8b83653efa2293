"""CLI: keygen, bundle build|verify|inspect, trust add|list|revoke|sign, via main([...])."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.signing.conftest import Kit
from wasmgate.guest_adapters.build import package_root
from wasmgate.runtime.cli import main
from wasmgate.signing import (
    TRUST_PAYLOAD_TYPE,
    BundleStore,
    TrustStore,
    encode_public,
    generate_key,
    key_id_of,
    write_private_key,
)


def _keygen(tmp: Path, name: str = "k", *extra: str) -> tuple[Path, str]:
    assert main(["keygen", "--out", str(tmp / name), *extra]) == 0
    pub = json.loads((tmp / f"{name}.pub").read_text())
    return tmp / name, pub["key_id"]


@pytest.fixture
def signed(kit: Kit, tmp_path: Path) -> tuple[Path, Path, str]:
    """(bundle, trust file, key id): a bundle built by the CLI and a trust file for it."""
    key, key_id = _keygen(tmp_path)
    trust = tmp_path / "trust.json"
    assert main(["trust", "add", f"{key}.pub", "--names", "digits*", "--trust", str(trust)]) == 0
    out = tmp_path / "digits-3.wgb"
    cmd = ["bundle", "build", str(kit.src), "--key", str(key), "--version", "3", "--out", str(out)]
    assert main(cmd) == 0
    return out, trust, key_id


def test_keygen_prints_key_and_refuses_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, key_id = _keygen(tmp_path)
    out = capsys.readouterr().out
    assert key_id in out
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert main(["keygen", "--out", str(key)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_keygen_with_passphrase_file(kit: Kit, tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    key, _ = _keygen(tmp_path, "enc", "--passphrase-file", str(pw))
    assert "encrypted" in key.read_text()
    out = tmp_path / "b.wgb"
    build = ["bundle", "build", str(kit.src), "--key", str(key), "--out", str(out)]
    assert main([*build, "--version", "1"]) == 1  # no passphrase given, stdin not a terminal
    assert main([*build, "--version", "1", "--passphrase-file", str(pw)]) == 0


def test_build_verify_inspect(
    signed: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, trust, key_id = signed
    capsys.readouterr()
    assert main(["bundle", "verify", str(bundle), "--trust", str(trust)]) == 0
    assert f"OK digits@3: signed by trusted key {key_id}" in capsys.readouterr().out
    assert main(["bundle", "verify", str(bundle), "--trust", str(trust.parent)]) == 0
    assert main(["bundle", "inspect", str(bundle)]) == 0
    text = capsys.readouterr().out
    assert "NOT verified" in text
    assert "digits-fp32.onnx" in text
    assert main(["bundle", "inspect", str(bundle), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["manifest"]["version"] == 3
    assert doc["signers"] == [key_id]
    assert doc["verified"] is False


def test_verify_failures_are_one_line(
    kit: Kit, signed: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, trust, key_id = signed
    data = bytearray(bundle.read_bytes())
    data[data.index((kit.root / "src" / "models" / "digits-fp32.onnx").read_bytes())] ^= 1
    bad = tmp_path / "bad.wgb"
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["bundle", "verify", str(bad), "--trust", str(trust)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "SHA-256 does not match" in err
    assert main(["trust", "revoke", key_id, "--trust", str(trust)]) == 0
    assert main(["bundle", "verify", str(bundle), "--trust", str(trust)]) == 1
    assert "is revoked" in capsys.readouterr().err


def test_verify_with_state_dir_checks_rollback(
    kit: Kit, signed: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, trust, _ = signed
    state = tmp_path / "state"
    store = BundleStore(state, TrustStore.load(trust), max_bundle_bytes=10**8)
    store.install(bundle)
    assert main(["bundle", "verify", str(bundle), "--trust", str(trust)]) == 0
    args = ["bundle", "verify", str(bundle), "--trust", str(trust), "--state-dir", str(state)]
    assert main(args) == 0  # same version, same content: fine
    key = tmp_path / "k"
    older = tmp_path / "digits-2.wgb"
    assert main(["bundle", "build", str(kit.src), "--key", str(key), "--version", "2",
                 "--out", str(older)]) == 0  # fmt: skip
    capsys.readouterr()
    older_args = ["bundle", "verify", str(older), "--trust", str(trust), "--state-dir", str(state)]
    assert main(older_args) == 1
    assert "version 2 < installed 3" in capsys.readouterr().err


def test_build_errors(kit: Kit, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = _keygen(tmp_path)
    out = str(tmp_path / "x.wgb")
    assert main(["bundle", "build", str(kit.src), "--key", str(key), "--expires", "soon",
                 "--out", out]) == 1  # fmt: skip
    assert "--expires" in capsys.readouterr().err
    (kit.src / "bundle.toml").write_text('name = "digits"\nversion = 1\ncolour = "red"\n')
    assert main(["bundle", "build", str(kit.src), "--key", str(key), "--out", out]) == 1
    assert "colour" in capsys.readouterr().err


def test_trust_list_and_revoke_bundle(
    signed: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, trust, key_id = signed
    digest = "ab" * 32
    assert main(["trust", "revoke", "--bundle", digest, "--trust", str(trust)]) == 0
    capsys.readouterr()
    assert main(["trust", "list", "--trust", str(trust)]) == 0
    out = capsys.readouterr().out
    assert f"{key_id}  signer  trusted  digits*" in out
    assert f"bundle {digest}  REVOKED" in out
    assert main(["trust", "list", "--json", "--trust", str(trust)]) == 0
    assert json.loads(capsys.readouterr().out)["revoked"]["bundles"] == [digest]
    assert main(["trust", "revoke", "--trust", str(trust)]) == 2
    assert main(["trust", "revoke", "xyz", "--trust", str(trust)]) == 1


def test_trust_edits_default_to_the_config_files_trust_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --trust, `trust add` edits the file the daemon and doctor read: the one the
    default config file names (the Debian package's says /etc/wasmgate/trust.json)."""
    config = tmp_path / "config.toml"
    config.write_text(f'[paths]\ntrust_file = "{tmp_path / "etc-trust.json"}"\n')
    monkeypatch.setattr("wasmgate.runtime.ops.config.DEFAULT_CONFIG_PATH", config)
    monkeypatch.delenv("WASMGATE_PATHS__TRUST_FILE", raising=False)
    monkeypatch.setenv("WASMGATE_PATHS__DATA_DIR", str(tmp_path / "data"))
    key, key_id = _keygen(tmp_path)
    assert main(["trust", "add", f"{key}.pub", "--names", "x"]) == 0
    assert key_id in json.loads((tmp_path / "etc-trust.json").read_text())["signers"]
    assert not (tmp_path / "data" / "trust.json").exists()
    config.write_text("[paths]\ntrust_fil = 1\n")  # a broken config: one line, no traceback
    assert main(["trust", "list"]) == 1


def test_trust_edits_leave_the_file_readable_by_the_service(signed: tuple[Path, Path, str]) -> None:
    """The service (systemd's DynamicUser) is another user than root, who edits the file."""
    _, trust, _ = signed
    assert stat.S_IMODE(trust.stat().st_mode) == 0o644
    assert main(["trust", "revoke", "--bundle", "cd" * 32, "--trust", str(trust)]) == 0
    assert stat.S_IMODE(trust.stat().st_mode) == 0o644


def test_trust_add_ceilings_and_bad_patterns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    trust = str(tmp_path / "t.json")
    b64 = encode_public(key.verify_key)
    assert main(["trust", "add", b64, "--names", "a*", "--names", "b",
                 "--max-limit", "memory_mb=64", "--trust", trust]) == 0  # fmt: skip
    doc = json.loads(Path(trust).read_text())
    entry = doc["signers"][key_id_of(key.verify_key)]
    assert entry["names"] == ["a*", "b"]
    assert entry["max_limits"] == {"memory_mb": 64}
    assert main(["trust", "add", b64, "--names", "../x", "--trust", trust]) == 1
    assert (
        main(["trust", "add", b64, "--names", "a", "--max-limit", "cpu=2", "--trust", trust]) == 1
    )
    assert main(["trust", "add", "nonsense", "--names", "a", "--trust", trust]) == 2
    assert "trust edit refused" in capsys.readouterr().err


def test_trust_sign_then_load(tmp_path: Path) -> None:
    root = generate_key()
    rk = tmp_path / "root.key"
    write_private_key(rk, root)
    doc = {
        "version": 1,
        "root": {
            "keys": {key_id_of(root.verify_key): encode_public(root.verify_key)},
            "threshold": 1,
        },
    }
    src = tmp_path / "doc.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "trust.json"
    assert main(["trust", "sign", str(src), "--key", str(rk), "--out", str(out)]) == 0
    assert main(["trust", "list", "--trust", str(out)]) == 0
    assert main(["trust", "revoke", "ab" * 32, "--trust", str(out)]) == 1  # signed: not editable
    loaded = TrustStore.load(out)
    assert loaded.signed
    assert loaded.doc.root is not None
    assert json.loads(out.read_text())["payload_type"] == TRUST_PAYLOAD_TYPE


def test_subprocess_help_and_one_line_error(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "wasmgate"]
    ok = subprocess.run([*run, "bundle", "--help"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0
    assert "verify" in ok.stdout
    bad = subprocess.run(
        [*run, "bundle", "verify", str(tmp_path / "missing.wgb"), "--trust", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 1
    assert bad.stderr.startswith("wasmgate bundle: ")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_bundle_expires_90_days_after_it_is_built_as_the_help_and_guide_say(
    signed: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The default validity is what `bundle build --help` and the nine-command guide tell a
    reader who never passes --expires."""
    bundle, _, _ = signed
    capsys.readouterr()
    assert main(["bundle", "inspect", str(bundle), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)["manifest"]
    issued = datetime.fromisoformat(manifest["issued_at"])
    assert datetime.fromisoformat(manifest["expires"]) - issued == timedelta(days=90)
    with pytest.raises(SystemExit):
        main(["bundle", "build", "--help"])
    assert "expires 90 days" in " ".join(capsys.readouterr().out.split())
    guide = (package_root() / "README.md").read_text(encoding="utf-8")
    nine = guide.split("## Make your own adapter (nine commands)", 1)[1].split("\n## ", 1)[0]
    assert "A bundle expires 90 days after it is built" in nine

"""``wasmgate doctor`` on real files, a real daemon's state and real mosquitto brokers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, write_config
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name
from wasmgate.runtime.cli._broker_probe import probe_broker
from wasmgate.runtime.cli._checks import check_data_dir, check_unit
from wasmgate.runtime.cli._running import running_paths
from wasmgate.runtime.ops.config import HttpSettings, MqttSettings, PathSettings, Settings
from wasmgate.signing import TrustStore
from wasmgate.signing.keys import encode_public


def doctor(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "wasmgate", "doctor", "--json", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, json.loads(done.stdout)


def by_check(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {f["check"]: f for f in report["findings"]}


@pytest.mark.timeout(300)
def test_bundle_dir_contents_with_reasons(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    kit, stranger = BundleKit(tmp_path / "kit"), BundleKit(tmp_path / "stranger")
    trust = kit.save_trust(tmp_path / "trust.json")
    config = {"paths": {"trust_file": trust}, "profile": host_profile_name()}
    daemon = daemon_factory(config=config, name="gw")
    bundles = daemon.workdir / "data" / "bundles"
    kit.build("probe", 3, out_dir=bundles)
    daemon.stop()
    daemon.start()  # probe 3 is now the installed version
    daemon.stop()
    kit.build("probe", 1, out_dir=bundles)  # an old file left behind
    stranger.build("other", 1, out_dir=bundles)  # signed by a key nobody trusts
    code, report = doctor("--config", daemon.config_path)
    found = by_check(report)
    assert found["config"]["level"] == "ok"
    assert found["trust file"]["level"] == "ok"
    assert found["bundle probe-3.wgb"]["level"] == "ok"
    assert found["bundle probe-1.wgb"]["level"] == "warn"
    assert "older than the installed version" in found["bundle probe-1.wgb"]["message"]
    assert "delete" in found["bundle probe-1.wgb"]["fix"]
    assert found["bundle other-1.wgb"]["level"] == "error"
    assert "not trusted" in found["bundle other-1.wgb"]["message"]
    assert "trust add" in found["bundle other-1.wgb"]["fix"]
    assert found["providers: onnx"]["level"] == "ok"
    assert found["mqtt broker"]["level"] == found["registry"]["level"] == "skip"
    assert found["registry"]["message"].startswith("not configured")
    assert found["clock"]["level"] == "ok"
    assert (code, report["exit_code"]) == (2, 2)  # the worst finding: an error


def test_config_errors_name_the_variable(tmp_path: Path) -> None:
    code, report = doctor(env={"WASMGATE_HTPP__PORT": "9000"})
    assert code == 2
    [finding] = report["findings"]
    assert finding["level"] == "error"
    assert "WASMGATE_HTPP__PORT" in finding["message"]
    code, report = doctor(env={"WASMGATE_HTTP__PORT": "abc"})
    [finding] = report["findings"]
    assert "variable WASMGATE_HTTP__PORT: http.port: 'abc' is not an integer" in finding["message"]
    assert "Expected" not in finding["message"]  # every variable is text: msgspec's words mislead


def test_a_missing_config_files_fix_creates_it(tmp_path: Path) -> None:
    missing = tmp_path / "etc" / "config.toml"
    code, report = doctor("--config", missing)
    [finding] = report["findings"]
    assert (code, finding["level"]) == (2, "error")
    assert f"install -D -m 644 /dev/null {missing}" in finding["fix"]
    command = finding["fix"].removeprefix("create it: ").split(" (")[0]
    subprocess.run(command.split(), check=True)  # the fix as printed
    assert by_check(doctor("--config", missing)[1])["config"]["level"] == "ok"


def test_paths_and_unit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)
    found = {f.check: f for f in check_data_dir(Settings(paths=PathSettings(data_dir=data)))}
    assert found["paths: data dir"].level == "error"
    assert "writable by everyone" in found["paths: data dir"].message
    assert found["paths: bundle dir"].level == "ok"  # created at first start
    unit = tmp_path / "wasmgate.service"
    unit.write_text("[Service]\nExecStart=/root/venv/bin/wasmgate serve --config /etc/w.toml\n")
    assert check_unit(unit).level == "error"
    assert "ProtectHome=yes" in check_unit(unit).message
    unit.write_text("[Service]\nExecStart=/usr/bin/true serve --config /etc/w.toml\n")
    missing = check_unit(unit)  # issue 51 item 2: a --config that names no file
    assert missing.level == "error"
    assert "ExecStart's --config /etc/w.toml does not exist" in missing.message
    assert "install -D -m 644 /dev/null /etc/w.toml" in missing.fix
    # any file outside /home, /root and /tmp that exists stands for an installed config
    unit.write_text("[Service]\nExecStart=/usr/bin/true serve --config /etc/os-release\n")
    assert check_unit(unit).level == "ok"
    unit.write_text("[Service]\nExecStart=/usr/bin/true serve\n")  # built-in defaults
    assert check_unit(unit).level == "ok"


def test_broker_round_trip_stock_mosquitto_vs_tcp_nodelay(tmp_path: Path) -> None:
    stock = Broker(tmp_path / "stock")
    fixed = Broker(tmp_path / "fixed", extra_conf="set_tcp_nodelay true\n")
    for broker in (stock, fixed):
        broker.start()
    try:
        slow = probe_broker(MqttSettings(host=stock.host, port=stock.port))
        # Nagle only ever adds delay: the stock broker is slow however idle the machine is.
        assert slow.level == "warn", slow
        assert "set_tcp_nodelay true" in slow.fix
        # Without Nagle a round trip is about a millisecond; a loaded machine may spoil one
        # measurement, not three.
        levels = [probe_broker(MqttSettings(host=fixed.host, port=fixed.port)) for _ in range(3)]
        assert any(f.level == "ok" for f in levels), levels
    finally:
        stock.stop()
        fixed.stop()


def test_broker_unreachable_is_an_error(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.toml",
        {"paths": {"data_dir": tmp_path / "d"}, "mqtt": {"host": "127.0.0.1", "port": free_port()}},
    )
    code, report = doctor("--config", config)
    assert code == 2
    assert "cannot connect" in by_check(report)["mqtt broker"]["message"]


@pytest.mark.timeout(300)
def test_a_refused_bundles_fix_is_a_command_that_fixes_it(tmp_path: Path) -> None:
    """A bundle signed by a key nobody trusts, and one whose trusted key may not sign its
    name: each finding's fix, run as printed (KEY.pub: the signer's public key, as the reader
    has it), makes the next doctor run find the bundle ok."""
    kit, stranger = BundleKit(tmp_path / "kit"), BundleKit(tmp_path / "stranger")
    trust = tmp_path / "trust.json"
    TrustStore.empty().with_signer(kit.key.verify_key, ["probe*"], {}).save(trust)
    bundles = tmp_path / "data" / "bundles"
    bundles.mkdir(parents=True)
    paths = {"data_dir": tmp_path / "data", "trust_file": trust}
    config = write_config(tmp_path / "c.toml", {"paths": paths, "profile": host_profile_name()})
    stranger.build("other", 1, out_dir=bundles)
    kit.build("wide", 1, out_dir=bundles)
    env = {"WASMGATE_PATHS__TRUST_FILE": str(trust)}  # where `trust add` writes by default
    found = by_check(doctor("--config", config, env=env)[1])
    untrusted, scoped = found["bundle other-1.wgb"], found["bundle wide-1.wgb"]
    assert untrusted["fix"].endswith(": wasmgate trust add KEY.pub --names other --names double")
    assert scoped["fix"].endswith(" --names 'probe*' --names wide --names double")
    wasmgate = f"{sys.executable} -m wasmgate"
    for finding, key in ((untrusted, stranger.key), (scoped, kit.key)):
        assert finding["level"] == "error"
        command = finding["fix"].rsplit(": ", 1)[1]
        command = command.replace("KEY.pub", encode_public(key.verify_key))
        command = command.replace("wasmgate ", f"{wasmgate} ", 1)
        done = subprocess.run(
            ["bash", "-c", command], env={**os.environ, **env}, capture_output=True, check=False
        )
        assert done.returncode == 0, done.stderr
    found = by_check(doctor("--config", config, env=env)[1])
    assert found["bundle other-1.wgb"]["level"] == "ok", found["bundle other-1.wgb"]
    assert found["bundle wide-1.wgb"]["level"] == "ok", found["bundle wide-1.wgb"]


@pytest.mark.timeout(300)
def test_every_warning_and_error_has_a_fix(tmp_path: Path) -> None:
    """A gateway with many things wrong at once: each warn and error finding says what to
    do, and the JSON carries the same ``fix``."""
    kit = BundleKit(tmp_path / "kit")
    data = tmp_path / "data"
    (data / "bundles").mkdir(parents=True)
    (data / "cache").write_text("not a directory")
    kit.build("old", 1, out_dir=data / "bundles", expires_in=timedelta(days=3))
    config = write_config(
        tmp_path / "c.toml",
        {
            "paths": {"data_dir": data, "trust_file": kit.save_trust(tmp_path / "t.json")},
            "mqtt": {"host": "127.0.0.1", "port": free_port()},
            "registry": {"host": f"127.0.0.1:{free_port()}", "insecure": True},
        },
    )
    code, report = doctor("--config", config)
    bad = [f for f in report["findings"] if f["level"] in ("warn", "error")]
    assert {f["check"] for f in bad} >= {"paths: cache dir", "bundle old-1.wgb", "mqtt broker"}
    assert "registry" in {f["check"] for f in bad}
    assert [f for f in bad if not f["fix"]] == []
    assert "90 days" in by_check(report)["bundle old-1.wgb"]["fix"]
    assert code == 2


OPERATOR = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def test_the_operator_docs_table_names_every_check_and_the_real_skip_texts(
    tmp_path: Path,
) -> None:
    """docs/operator.md's doctor table has one row per check the doctor makes, and the
    registry rows quote what an unconfigured registry really prints."""
    section = OPERATOR.read_text(encoding="utf-8").split("## `wasmgate doctor`", 1)[1]
    rows = [ln for ln in section.split("\n## ", 1)[0].splitlines() if ln.startswith("| ")]
    cells = {ln.split("|")[1].strip(): ln for ln in rows[2:]}  # past the head and ---
    config = write_config(tmp_path / "c.toml", {"paths": {"data_dir": tmp_path / "d"}})
    _, report = doctor("--config", config)
    checks = {f["check"].split(":")[0] for f in report["findings"]}
    checks = {"bundle files" if c.startswith("bundle") else c for c in checks}
    assert checks == set(cells)
    for finding in report["findings"]:
        if finding["check"] in ("registry", "samples registry"):
            assert finding["message"] in cells[finding["check"]], finding


@pytest.mark.timeout(300)
def test_doctor_beside_a_demo_daemon_checks_what_it_serves(
    daemon_factory: Callable[..., Daemon],
) -> None:
    """README: start `serve --demo`, then `wasmgate doctor` (issue 50 item 4). Doctor checked
    its own default trust file and bundle folder ("trusts no signer", "no bundle files")
    while four demo bundles served; it now asks the running daemon for its paths."""
    daemon = daemon_factory(extra_args=("--demo",))
    code, report = doctor("--config", daemon.config_path)
    found = by_check(report)
    demo = daemon.workdir / "data" / "demo"
    assert found["daemon"]["level"] == "ok"
    assert f"trust file {demo / 'trust.json'}" in found["daemon"]["message"]
    assert found["trust file"]["level"] == "ok"
    assert found["trust file"]["message"].startswith(str(demo / "trust.json"))
    served = {k for k, f in found.items() if k.startswith("bundle ") and f["level"] == "ok"}
    assert served == {f"bundle {n}.wgb" for n in EXAMPLES}
    # Nothing false: every finding is ok or skip, but the unit's, which is about where this
    # interpreter lives (a venv linked into /root warns, rightly), not about the daemon.
    wrong = [f for f in report["findings"] if f["level"] not in ("ok", "skip")]
    assert [f["check"] for f in wrong] in ([], ["systemd unit"]), wrong
    assert code == (1 if wrong else 0)
    daemon.stop()
    _, report = doctor("--config", daemon.config_path)  # stopped: its own paths, and says so
    assert by_check(report)["daemon"]["level"] == "skip"
    assert "checked the configured paths" in by_check(report)["daemon"]["message"]


EXAMPLES = ("digits", "digits-pipeline", "digits-zig", "vibration-anomaly")


def test_without_a_daemon_the_installed_units_paths_are_checked(tmp_path: Path) -> None:
    """Root's `doctor` beside a unit from `--print-unit` checked /var/lib/wasmgate/trust.json,
    not the unit's /etc/wasmgate/trust.json, and its fix wrote a file the service never
    reads (issue 50 item 4). With no daemon answering, the unit's --config and
    Environment= are what the service would use."""
    etc, cache = tmp_path / "etc", tmp_path / "cache"
    etc.mkdir()
    write_config(etc / "config.toml", {"paths": {"bundle_dir": tmp_path / "unit-bundles"}})
    unit = tmp_path / "wasmgate.service"
    unit.write_text(
        "[Service]\n"
        f"ExecStart=/opt/wasmgate/bin/wasmgate serve --config {etc / 'config.toml'}\n"
        f"Environment=WASMGATE_PATHS__CACHE_DIR={cache}\n"
        f"Environment=WASMGATE_PATHS__TRUST_FILE={etc / 'trust.json'} HOME=/var/lib/wasmgate\n"
    )
    shell = Settings(http=HttpSettings(port=free_port()))  # nobody listens there
    checked, finding = running_paths(shell, False, unit)
    assert finding.level == "ok"
    assert f"checked the installed unit's paths ({unit}: trust file {etc / 'trust.json'}" in (
        finding.message
    )
    assert checked.paths.resolved_trust_file() == etc / "trust.json"
    assert checked.paths.resolved("cache_dir") == cache
    assert checked.paths.resolved("bundle_dir") == tmp_path / "unit-bundles"  # its --config
    # `doctor --config FILE` checks that file's paths, whatever unit is installed
    same, finding = running_paths(shell, True, unit)
    assert (same, finding.level) == (shell, "skip")


def test_doctor_says_whether_workers_can_be_confined(tmp_path: Path) -> None:
    from wasmgate.runtime.ops.landlock import abi_version  # noqa: PLC0415

    data = {"paths": {"data_dir": tmp_path / "d"}}
    one = write_config(tmp_path / "one.toml", data)
    assert by_check(doctor("--config", one)[1])["workers"]["level"] == "skip"
    two = write_config(tmp_path / "two.toml", {**data, "workers": {"count": 2}})
    found = by_check(doctor("--config", two)[1])["workers"]
    abi = abi_version()
    if abi:
        assert found["level"] == "ok"
        assert found["message"].startswith(f"confined with Landlock ABI {abi}")
    else:
        assert found["level"] == "warn"
        assert "lsm=landlock" in found["fix"]

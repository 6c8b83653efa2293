"""`confine_worker` on this kernel: a process it confined (as a worker is) cannot reach a key
file by any way the attacks know, and still does what a worker does. The same process tries
everything unconfined first: each attack must work there, or the test proves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import write_config
from wasmgate.runtime.ops.landlock import abi_version
from wasmgate.signing.keys import generate_key, write_private_key

PROBE = Path(__file__).resolve().parents[2] / "fixtures" / "confine_probe"
ABI = abi_version()
needs_landlock = pytest.mark.skipif(ABI == 0, reason="this kernel has no Landlock")

CHILD = """
import json, os, sys
from pathlib import Path
import confine_attacks as attacks
from wasmgate.runtime.ops.config import load_settings
from wasmgate.runtime.ops.confine import confine_worker

what = json.loads(sys.argv[1])
settings = load_settings(Path(what["config"]))
parent = os.getppid()

def battery(tag):
    mine = os.path.join(what["writable"], tag)
    os.makedirs(mine)
    return {
        "keys": attacks.key_attacks(what["keys"], mine, parent),
        "other": attacks.other_attacks(mine, parent),
        "works": attacks.must_work(what["readable"], mine),
    }

before = battery("before")
confine_worker(settings, Path(what["run"]), what["config"])
status = Path("/proc/self/status").read_text()
print(json.dumps({"before": before, "after": battery("after"), "status": status}))
"""


def _gateway_files(tmp_path: Path) -> dict[str, Any]:
    """A data folder with a signing key dropped in it, a key beside the config, a bundle."""
    data, etc, run = tmp_path / "data", tmp_path / "etc", tmp_path / "run"
    for folder in (data / "bundles", data / "state", data / "cache", etc, run):
        folder.mkdir(parents=True)
    write_private_key(data / "signing.key", generate_key())
    write_private_key(etc / "fleet.key", generate_key())
    (data / "bundles" / "a.wgb").write_bytes(b"bundle")
    (data / "trust.json").write_text("{}")
    config = write_config(etc / "config.toml", {"paths": {"data_dir": data}})
    return {
        "config": str(config),
        "run": str(run),
        "keys": [str(data / "signing.key"), str(etc / "fleet.key")],
        "readable": [str(data / "bundles" / "a.wgb"), str(data / "trust.json"), str(config)],
        "writable": str(data / "state"),
    }


def _run(tmp_path: Path) -> dict[str, Any]:
    what = _gateway_files(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(PROBE)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(what)],
        capture_output=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@needs_landlock
def test_a_confined_process_reaches_no_key_and_still_works(tmp_path: Path) -> None:
    found = _run(tmp_path)
    before, after = found["before"], found["after"]
    # Unconfined, each way in works (the test could fail), and so does the work.
    assert set(before["keys"].values()) == {"ok"}, before["keys"]
    assert set(before["works"].values()) == {"ok"}, before["works"]
    denied = {k: v for k, v in after["keys"].items() if v not in ("EACCES", "EXDEV", "EPERM")}
    assert denied == {}, f"reached a key: {denied}"
    assert set(after["works"].values()) == {"ok"}, after["works"]
    assert before["other"]["exec what it wrote"] == "ok"
    assert after["other"]["exec what it wrote"] == "EACCES"
    if os.geteuid() == 0:  # else the disks' modes keep it out already
        assert before["other"]["read a disk"] == "ok"
    assert "EACCES" in after["other"]["read a disk"].split(",")  # and no "ok"
    assert "NoNewPrivs:\t1" in found["status"]
    for line in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert f"{line}:\t0000000000000000" in found["status"]


@pytest.mark.skipif(ABI < 4, reason=f"Landlock ABI {ABI}: binding TCP needs ABI 4")
def test_a_confined_process_binds_no_tcp_port(tmp_path: Path) -> None:
    found = _run(tmp_path)
    assert found["before"]["other"]["bind TCP"] == "ok"
    assert found["after"]["other"]["bind TCP"] == "EACCES"


@pytest.mark.skipif(ABI < 6, reason=f"Landlock ABI {ABI}: signal scoping needs ABI 6")
def test_a_confined_process_signals_no_process_outside_it(tmp_path: Path) -> None:
    found = _run(tmp_path)
    signal = next(k for k in found["after"]["other"] if k.startswith("signal "))
    assert found["before"]["other"][signal] == "ok"
    assert found["after"]["other"][signal] == "EPERM"


def test_a_process_with_a_thread_running_refuses_to_confine(tmp_path: Path) -> None:
    """The calls confine the calling thread only: one started before would stay free."""
    what = _gateway_files(tmp_path)
    child = (
        "import threading, time, sys\n"
        "from wasmgate.runtime.ops.config import load_settings\n"
        "from wasmgate.runtime.ops.confine import confine_worker\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "confine_worker(load_settings(None), __import__('pathlib').Path(sys.argv[1]), None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, what["run"]], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert b"a worker confines itself with one thread, not 2" in done.stderr


def test_without_landlock_a_worker_logs_it_and_keeps_the_rest(tmp_path: Path) -> None:
    """A kernel without Landlock (stood in for by the version query answering 0): the worker
    says so once, still has no new privileges and no capabilities, and the key stays
    readable (what the docs say it loses there)."""
    what = _gateway_files(tmp_path)
    child = (
        "import sys, logging\n"
        "from pathlib import Path\n"
        "from wasmgate.runtime.ops import landlock\n"
        "from wasmgate.runtime.ops.config import load_settings\n"
        "from wasmgate.runtime.ops.confine import confine_worker\n"
        "landlock.abi_version = lambda: 0\n"
        "confine_worker(load_settings(Path(sys.argv[1])), Path(sys.argv[2]), sys.argv[1])\n"
        "print(Path('/proc/self/status').read_text())\n"
        "print(len(Path(sys.argv[3]).read_bytes()))\n"
    )
    args = [what["config"], what["run"], what["keys"][0]]
    done = subprocess.run(
        [sys.executable, "-c", child, *args], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr.count("this kernel has no Landlock") == 1
    assert "NoNewPrivs:\t1" in done.stdout
    assert "CapEff:\t0000000000000000" in done.stdout
    assert int(done.stdout.split()[-1]) > 0

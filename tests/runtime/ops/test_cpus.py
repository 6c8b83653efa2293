"""Where the daemon's threads run (`wasmgate.runtime.ops.cpus`): Python threads on one CPU,
native inference pools on every CPU the process may use.

Pinning changes the whole process, so each case runs in a child process of its own (a real
daemon under ``taskset``, or a small script), never in the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import ModelFiles
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import settings_from

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "guest_adapters" / "examples" / "digits" / "samples" / "zero.json"


def _two_cpus() -> tuple[int, int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs a process allowed on two CPUs (CI has two)")
    return cpus[0], cpus[1]


def _allowed(pid: int) -> dict[int, frozenset[int]]:
    """Each thread of ``pid``: the CPUs it may run on."""
    out: dict[int, frozenset[int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # ended meanwhile
        line = next(ln for ln in text.splitlines() if ln.startswith("Cpus_allowed_list:"))
        out[int(task.name)] = _parse_list(line.split(":", 1)[1].strip())
    return out


def _parse_list(text: str) -> frozenset[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def _post(daemon: Daemon, n: int) -> None:
    for _ in range(n):
        req = urllib.request.Request(
            f"{daemon.url}/v1/adapters/digits", data=SAMPLE.read_bytes(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200


def test_daemon_on_two_cpus_runs_python_on_one(tmp_path: Path) -> None:
    first, last = _two_cpus()
    daemon = Daemon(tmp_path, {}, ("--demo",), prefix=("taskset", "-c", f"{first},{last}"))
    daemon.start(timeout=180)
    try:
        assert daemon.proc is not None
        pid = daemon.proc.pid
        plan = daemon.get_json("/v1/status")["components"]["cpus"]
        assert plan == {"allowed": [first, last], "python": [last], "pinned": True}
        assert f"python threads on CPU {last} of {first},{last}" in daemon.log()
        before = _allowed(pid)
        assert before[pid] == {last}  # the main thread: the event loop
        # Requests start threads of their own (the sandbox's background builder, the
        # pools' workers, asyncio's executor): they inherit the one CPU, none escapes.
        _post(daemon, 40)
        after = _allowed(pid)
        wide_before = {t for t, c in before.items() if c != {last}}
        wide_after = {t for t, c in after.items() if c != {last}}
        assert wide_after <= wide_before, "a thread started by a request is not pinned"
        # What is not on the one CPU was started by a native pool: the whole set, or one
        # CPU that ONNX Runtime chose for its own intra-op thread.
        assert all(after[t] == {first, last} or len(after[t]) == 1 for t in wide_after)
        assert len(after) > len(wide_after) + 5  # most threads are Python's, pinned
    finally:
        daemon.stop()


def test_daemon_on_one_cpu_pins_nothing(tmp_path: Path) -> None:
    _, last = _two_cpus()
    daemon = Daemon(tmp_path, {}, ("--demo",), prefix=("taskset", "-c", str(last)))
    daemon.start(timeout=180)
    try:
        plan = daemon.get_json("/v1/status")["components"]["cpus"]
        assert plan == {"allowed": [last], "python": [last], "pinned": False}
        assert "python threads on CPU" not in daemon.log()
    finally:
        daemon.stop()


_NATIVE = """
import json, os, sys, threading
import onnxruntime as ort
from wasmgate.runtime.ops.cpus import CpuPlan

def tasks():
    return {int(t): frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}

plan = CpuPlan.current().one_cpu()
moved = plan.apply()
seen = {}
def note(key):
    seen[key] = sorted(os.sched_getaffinity(0))
t = threading.Thread(target=note, args=("thread",)); t.start(); t.join()
before = tasks()
so = ort.SessionOptions()
so.intra_op_num_threads = 3  # two pool threads besides the caller
with plan.native():
    note("inside")
    session = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
note("main")
try:
    with plan.native():
        raise RuntimeError("boom")
except RuntimeError:
    note("after_error")
new = {t: sorted(c) for t, c in tasks().items() if t not in before}
print(json.dumps({"moved": moved, "seen": seen, "new": list(new.values()),
                  "old": sorted({tuple(sorted(c)) for c in before.values()})}))
"""


def test_native_pools_span_every_cpu(tmp_path: Path, models: ModelFiles) -> None:
    first, last = _two_cpus()
    model = models.digits_fp32
    script = tmp_path / "native.py"
    script.write_text(textwrap.dedent(_NATIVE))
    done = subprocess.run(
        ["taskset", "-c", f"{first},{last}", sys.executable, str(script), str(model)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    doc = json.loads(done.stdout.splitlines()[-1])
    assert doc["moved"] >= 1
    assert doc["old"] == [[last]]  # every thread there before: the one CPU
    assert doc["seen"] == {
        "thread": [last],  # a Python thread inherits it
        "inside": [first, last],  # widened for the native block
        "main": [last],  # and back
        "after_error": [last],  # back even when the block raised
    }
    assert doc["new"] == [[first, last], [first, last]]  # ORT's two intra-op threads


def test_affinity_off_leaves_threads_where_the_kernel_puts_them(tmp_path: Path) -> None:
    first, last = _two_cpus()
    config = {"workers": {"cpu_affinity": "off"}}
    daemon = Daemon(tmp_path, config, ("--demo",), prefix=("taskset", "-c", f"{first},{last}"))
    daemon.start(timeout=180)
    try:
        assert daemon.proc is not None
        plan = daemon.get_json("/v1/status")["components"]["cpus"]
        assert plan == {"allowed": [first, last], "python": [first, last], "pinned": False}
        _post(daemon, 5)
        threads = _allowed(daemon.proc.pid)
        assert threads[daemon.proc.pid] == {first, last}
        # ONNX Runtime pins its own intra-op threads (one to a core) when the profile leaves
        # their count to it; the Python threads keep the whole set.
        wide = [t for t, c in threads.items() if c == {first, last}]
        assert len(wide) >= 8, threads
        assert all(len(c) == 1 for c in threads.values() if c != {first, last}), threads
    finally:
        daemon.stop()


def test_unknown_affinity_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"workers\.cpu_affinity"):
        settings_from({"workers": {"cpu_affinity": "sometimes"}})

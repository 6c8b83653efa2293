"""A real gateway with ``[workers] count = 2`` serving a model whose weights (2 MiB) are
shared: the supervisor and both workers map one sealed memfd and hold its pages as shared
memory, not a copy each; a new version of the model replaces the file everywhere."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.runtime.backends.models import wide_onnx
from tests.runtime.supervisor.workerkit import TOKEN, until_replaced, until_serving

pytestmark = pytest.mark.timeout(300)
MEMFD = "/memfd:wasmgate-weights-"


def _weights_maps(pid: int) -> dict[str, int]:
    """memfd name -> kB of it resident in ``pid``'s mappings of shared weights."""
    out: dict[str, int] = {}
    name = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 and fields[5].startswith(MEMFD) else None
        elif name is not None and fields[0] == "Rss:":
            out[name] = out.get(name, 0) + int(fields[1])
    return out


def _fds(pid: int) -> list[str]:
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            out.append(str(fd.readlink()))
    return out


def _shmem_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss_Shmem:"):
            return int(line.split()[1])
    return 0


def _infer(daemon: Daemon, times: int) -> list[list[float]]:
    x = np.linspace(-1, 1, 512, dtype=np.float32)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 512],
                                   "data": x.tolist()}]}).encode()  # fmt: skip
    answers = []
    for _ in range(times):  # a connection each: the kernel spreads them over the workers
        with urllib.request.urlopen(f"{daemon.url}/v2/models/wide/infer", body, timeout=30) as r:
            answers.append(json.loads(r.read())["outputs"][0]["data"])
    return answers


def _pids(daemon: Daemon) -> list[int]:
    assert daemon.proc is not None
    workers = until_serving(daemon, 2)
    return [daemon.proc.pid, *(int(str(w["pid"])) for w in workers)]


def _install(daemon: Daemon, data: bytes) -> None:
    req = urllib.request.Request(f"{daemon.url}/v1/bundles", data=data, method="PUT",
                                 headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as answer:
        assert answer.status in {200, 201}


def test_workers_serve_one_shared_copy_and_a_new_version_replaces_it(tmp_path: Path) -> None:
    kit = BenchKit(tmp_path / "kit")
    (tmp_path / "m").mkdir()
    v1, v2 = tmp_path / "m" / "v1.onnx", tmp_path / "m" / "v2.onnx"
    v1.write_bytes(wide_onnx(1))
    v2.write_bytes(wide_onnx(2))
    kit.build("wide", v1)
    newer = kit.build("wide", v2, version=2, out_dir=tmp_path).read_bytes()
    extra = {"workers": {"count": 2}, "http": {"management_token": TOKEN}, "drain_s": 1}
    (tmp_path / "gw").mkdir()
    daemon = Daemon(tmp_path / "gw", kit.config(extra))
    daemon.start(timeout=240)
    try:
        pids = _pids(daemon)
        first = _infer(daemon, 20)
        assert all(a == first[0] for a in first)
        maps = [_weights_maps(pid) for pid in pids]
        names = {n for m in maps for n in m}
        assert len(names) == 1, maps  # one file for the supervisor and both workers
        for pid, m in zip(pids, maps, strict=True):
            assert m, f"process {pid} does not map the shared weights"
            assert _shmem_kb(pid) >= 2048 // 3, "the weights are not shared memory"
        old = names.pop()
        notes = [m["notes"] for m in daemon.get_json("/v1/status")["models"]]
        assert any("weights shared in place" in n for n in notes), notes

        _install(daemon, newer)
        until_replaced(daemon, pids[1])
        until_replaced(daemon, pids[2])
        pids = _pids(daemon)
        second = _infer(daemon, 10)
        assert second[0] != first[0]  # the new weights answer
        maps = [_weights_maps(pid) for pid in pids]
        assert all(old not in m for m in maps), f"the old weights are still mapped: {maps}"
        assert len({n for m in maps for n in m}) == 1
        assert not [f for f in _fds(pids[0]) if old in f]  # the supervisor closed its files
    finally:
        daemon.stop()


def test_a_single_process_keeps_its_own_copy(tmp_path: Path) -> None:
    """``count = 1`` loads as before: no shared file, no socket, ORT's own tensors."""
    kit = BenchKit(tmp_path / "kit")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "v1.onnx").write_bytes(wide_onnx(1))
    kit.build("wide", tmp_path / "m" / "v1.onnx")
    (tmp_path / "gw").mkdir()
    daemon = Daemon(tmp_path / "gw", kit.config({"workers": {"count": 1}}))
    daemon.start(timeout=240)
    try:
        assert daemon.proc is not None
        _infer(daemon, 3)
        assert _weights_maps(daemon.proc.pid) == {}
        assert _shmem_kb(daemon.proc.pid) < 1024
        notes = [m["notes"] for m in daemon.get_json("/v1/status")["models"]]
        assert notes
        assert not any("weights shared" in n for n in notes), notes
        assert "optimized graph" in notes[0]  # loaded as before, through the cache
    finally:
        daemon.stop()

"""Model weights shared by a gateway's processes (issue 49) against a copy in each.

``python -m bench.bench_weights [--quick]`` (scenario ``weights``)

- **Latency**, in one process: the same model loaded by wasmgate's ONNX backend twice, its
  weights ORT's own tensors (*copied*, as with ``count = 1``) and used in place over the
  sealed, read-only mapping (*in place*, `wasmgate.runtime.backends.onnx_weights`), p50 of
  batch-1 runs, the two alternating in rounds. MobileNet-class fp32 (17 MB) and the digits
  MLP (10 KB: below the 1 MiB threshold, so forced in place here to show what a small
  model would pay).
- **Memory**: fresh 2-worker daemons (``taskset -c 0,1``) serving the MobileNet bundle with
  ``[workers] share_weights`` true and false, interleaved, each once every bundle and model
  answered 20 requests; every process read from ``/proc/PID/smaps_rollup`` (PSS, its
  anonymous and shared-memory parts).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.common import Figure, script_main, timed
from bench.cores_memory import exercise, rollup, tree
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from wasmgate.device_profiles import load_profile
from wasmgate.runtime.backends import LoadOptions, ModelSpec
from wasmgate.runtime.backends import onnx_weights as ow
from wasmgate.runtime.backends.base import LoadedModel
from wasmgate.runtime.backends.onnx import OnnxBackend
from wasmgate.runtime.backends.weight_share import WeightServer

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "guest_adapters" / "models" / "digits-fp32.onnx"
PROFILE = "generic-x86_64"


@contextmanager
def _forced_small() -> Iterator[None]:
    """Share every initializer of any model (the digits MLP is far below the threshold)."""
    saved = ow.SHARE_MIN_BYTES, ow.TENSOR_MIN_BYTES
    ow.SHARE_MIN_BYTES, ow.TENSOR_MIN_BYTES = 0, 0
    try:
        yield
    finally:
        ow.SHARE_MIN_BYTES, ow.TENSOR_MIN_BYTES = saved


def _pair(path: Path, server: WeightServer) -> tuple[LoadedModel, LoadedModel]:
    profile = load_profile(PROFILE)
    data = path.read_bytes()
    copied = OnnxBackend().load(data, ModelSpec("m"), LoadOptions(profile))
    shared = OnnxBackend().load(data, ModelSpec("m"), LoadOptions(profile, weights=server))
    if not any("weights shared in place" in n for n in shared.notes):
        raise RuntimeError(f"{path.name} was not loaded in place: {shared.notes}")
    return copied, shared


def _latency(name: str, path: Path, rounds: int, runs: int) -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        server = WeightServer(Path(tmp) / "weights.sock")
        try:
            copied, shared = _pair(path, server)
            shape = [1 if d < 0 else d for d in copied.inputs[0].shape]
            x = np.random.default_rng(0).random(shape, dtype=np.float32)
            if not np.array_equal(copied.infer([x])[0], shared.infer([x])[0]):
                raise RuntimeError(f"{name}: in place and copied answer differently")
            times: dict[str, list[float]] = {"copied": [], "shared": []}
            for _ in range(rounds):  # alternating: the machine's load hits both alike
                times["copied"] += timed(lambda: copied.infer([x]), repeat=runs)
                times["shared"] += timed(lambda: shared.infer([x]), repeat=runs)
            copied.close()
            shared.close()
        finally:
            server.close()
    p50 = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return [Figure("weights", f"{name}: p50 batch 1, weights in place", p50["shared"], "ms",
                   "weights copied", p50["copied"])]  # fmt: skip


def _daemon(kit: BenchKit, workdir: Path, *, share: bool) -> Daemon:
    workdir.mkdir(parents=True)
    config = {"log": {"level": "WARNING"}, "workers": {"count": 2, "share_weights": share}}
    daemon = Daemon(workdir, kit.config(config), (), None, ("taskset", "-c", "0,1"))
    daemon.start(timeout=180)
    return daemon


Split = dict[str, float]


def _gateway(daemon: Daemon) -> list[Split]:
    assert daemon.proc is not None  # started
    return [rollup(pid) for pid in tree(daemon.proc.pid)]


def _memory(starts: int) -> list[Figure]:
    runs: dict[bool, list[list[Split]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="wasmgate-weights-") as tmp:
        root = Path(tmp)
        kit = BenchKit(root / "kit")
        kit.build("mobilenet", get_models().mobilenet_fp32)
        body = payload(np.zeros((1, 3, 128, 128), np.float32))
        for n in range(starts):
            for share in (True, False):
                daemon = _daemon(kit, root / f"{share}-{n}", share=share)
                try:
                    exercise(daemon, {"mobilenet": body})
                    runs[share].append(_gateway(daemon))
                finally:
                    daemon.stop()
    for share, gateways in runs.items():
        print(_table(share, gateways), file=sys.stderr)
    total = {s: statistics.median(sum(p["Pss"] for p in g) for g in runs[s]) for s in runs}
    anon = {s: statistics.median(p["Pss_Anon"] for g in runs[s] for p in g[1:]) for s in runs}
    return [
        Figure("weights", "MobileNet, 2 workers: gateway PSS, shared", total[True], "MB",
               "a copy per process", total[False]),
        Figure("weights", "MobileNet, 2 workers: a worker's anonymous PSS, shared",
               anon[True], "MB", "a copy per process", anon[False]),
    ]  # fmt: skip


def _table(share: bool, gateways: list[list[Split]]) -> str:
    whole = statistics.median(sum(p["Pss"] for p in g) for g in gateways)
    lines = [f"share_weights={share}: median of {len(gateways)} starts (MiB)"]
    lines.append(f"  gateway PSS {whole:.1f}")
    for i, role in enumerate(["supervisor", "worker", "worker"]):
        same = [g[i] for g in gateways if len(g) > i]
        pss, anon, shmem, file = (
            statistics.median(p[k] for p in same)
            for k in ("Pss", "Pss_Anon", "Pss_Shmem", "Pss_File")
        )
        lines.append(
            f"  {role:<10} PSS {pss:5.1f} (anon {anon:5.1f}, shmem {shmem:4.1f}, file {file:4.1f})"
        )
    return "\n".join(lines)


def run(quick: bool) -> list[Figure]:
    rounds, runs, starts = (3, 20, 1) if quick else (10, 100, 3)
    figures = _latency("MobileNet fp32", get_models().mobilenet_fp32, rounds, runs)
    with _forced_small():
        figures += _latency("digits fp32 (forced)", DIGITS, rounds, runs * 10)
    return figures + _memory(starts)


def main() -> None:
    script_main(__doc__, run, "fewer rounds, one daemon start each")


if __name__ == "__main__":
    main()

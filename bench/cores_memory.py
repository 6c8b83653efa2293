"""Issue 49's memory goals: what a gateway with N data-plane workers holds, against one process.

``python -m bench.cores_memory [--quick]`` (also the last figures of `bench.bench_cores`)

Fresh daemons under ``taskset -c 0,1`` with ``[workers] count`` = 1, 2 and 3, the workers
forked from the zygote (the default) and, same run, exec'd (``[workers] zygote = false``, how
every worker started before the zygote), three starts each (one, forked only, with
``--quick``), on two sets of bundles: the demo's (``serve --demo``: four adapters, five ONNX
models of a few KB) and one MobileNet-class bundle (a 17 MB fp32 ONNX model behind the
pass-through adapter), the second showing what a model's weights cost each
worker. Once every bundle has answered a few requests (each adapter on its sample, each model
on a zeroed tensor of its shape, so every session has run), every process of the gateway is
read from ``/proc/PID/smaps_rollup``: PSS (each page divided among the processes that map
it, so the sum over the gateway counts a shared page once), split into anonymous memory
(heaps, arenas: private to a process started with ``exec``) and file pages (the shared
libraries' code, shared by every process that maps the same file).

Goals: with 2 workers, the gateway's total PSS <= 1.5 x the single process's RSS; each further
worker (PSS with 3 workers - PSS with 2) <= 50 MB. Memory figures hardly move with the load
of a shared machine; medians of the starts are printed, with every process's split.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Figure, script_main
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "guest_adapters" / "examples"
SAMPLES = {
    "digits": "digits/samples/zero.json",
    "digits-zig": "digits-zig/samples/zero.json",
    "digits-pipeline": "digits-pipeline/samples/seven.json",
    "vibration-anomaly": "vibration-anomaly/samples/spike.json",
}
REQUESTS = 20
GOAL_RATIO, GOAL_WORKER_MB = 1.5, 50.0
VARIANTS = ((1, True), (2, False), (3, False), (2, True), (3, True))
"""(``[workers] count``, ``[workers] zygote``): one process, exec'd workers, forked workers."""
Variant = tuple[int, bool]


@dataclass(frozen=True)
class Proc:
    """One process of the gateway (MiB): PSS and its anonymous and file-backed parts."""

    role: str
    rss: float
    pss: float
    anon: float
    file: float


Gateway = list[Proc]
"""Every process of one gateway, the daemon (or supervisor) first."""


def rollup(pid: int) -> dict[str, float]:
    """``/proc/PID/smaps_rollup`` in MiB (every mapping summed)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        out[key] = int(value.split()[0]) / 1024
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the supervisor's workers, any helper child)."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue  # a thread that just ended
    return [pid, *(p for kid in kids for p in tree(kid))]


def gateway(pid: int) -> Gateway:
    procs = []
    for p in tree(pid):
        argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        name = Path(f"/proc/{p}/comm").read_text().strip()  # a forked worker's argv is serve's
        worker = b"--worker" in argv or name.startswith("wasmgate-w")
        zygote = b"--zygote" in argv or name == "wasmgate-zygote"
        role = "worker" if worker else "zygote" if zygote else "main" if p == pid else "child"
        r = rollup(p)
        procs.append(Proc(role, r["Rss"], r["Pss"], r["Pss_Anon"], r["Pss_File"]))
    return procs


def _post(url: str, body: bytes) -> None:
    with urllib.request.urlopen(urllib.request.Request(url, body), timeout=30) as answer:
        answer.read()


def _zeros_request(meta: dict[str, Any]) -> bytes:
    """A V2 JSON request of zeros in the shapes ``meta`` declares (batch 1)."""
    inputs = []
    for i in meta["inputs"]:
        shape = [1 if d < 0 else d for d in i["shape"]]
        inputs.append({"name": i["name"], "datatype": i["datatype"], "shape": shape,
                       "data": [0] * int(np.prod(shape))})  # fmt: skip
    return json.dumps({"inputs": inputs}).encode()


def exercise(daemon: Daemon, adapters: dict[str, bytes]) -> None:
    """``REQUESTS`` of each adapter (its body) and of each model (zeros) the daemon serves."""
    for name, body in adapters.items():
        for _ in range(REQUESTS):
            _post(f"{daemon.url}/v1/adapters/{name}", body)
    for entry in daemon.get_json("/v1/status")["models"]:
        if entry["kind"] == "model":
            body = _zeros_request(daemon.get_json(f"/v2/models/{entry['name']}"))
            for _ in range(REQUESTS):
                _post(f"{daemon.url}/v2/models/{entry['name']}/infer", body)


Starter = Callable[[Path, Variant], tuple[Daemon, dict[str, bytes]]]


def measure(
    start: Starter, root: Path, starts: int, variants: tuple[Variant, ...]
) -> dict[Variant, list[Gateway]]:
    """``starts`` fresh gateways of each variant, interleaved (every variant, then again)."""
    out: dict[Variant, list[Gateway]] = {variant: [] for variant in variants}
    for n in range(starts):
        for count, zygote in variants:
            daemon, adapters = start(root / f"w{count}-{zygote:d}-{n}", (count, zygote))
            try:
                exercise(daemon, adapters)
                assert daemon.proc is not None  # started above
                out[count, zygote].append(gateway(daemon.proc.pid))
            finally:
                daemon.stop()
    return out


def _config(variant: Variant, extra: dict[str, Any]) -> dict[str, Any]:
    count, zygote = variant
    return {"log": {"level": "WARNING"}, "workers": {"count": count, "zygote": zygote}, **extra}


@contextmanager
def demo_starter(root: Path) -> Iterator[Starter]:
    """``serve --demo`` with its MQTT bridge on a broker of its own (as `bench.bench_cores`)."""
    broker = Broker(root / "mosquitto")
    broker.start()
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": "memory"}
    bodies = {name: (EXAMPLES / path).read_bytes() for name, path in SAMPLES.items()}

    def start(workdir: Path, variant: Variant) -> tuple[Daemon, dict[str, bytes]]:
        workdir.mkdir(parents=True)
        daemon = Daemon(workdir, _config(variant, {"mqtt": mqtt}), ("--demo",), None,
                        ("taskset", "-c", "0,1"))  # fmt: skip
        daemon.start(timeout=180)
        return daemon, bodies

    try:
        yield start
    finally:
        broker.stop()


@contextmanager
def mobilenet_starter(root: Path) -> Iterator[Starter]:
    """One signed bundle: the pass-through adapter and the 17 MB fp32 MobileNet."""
    kit = BenchKit(root / "kit")
    model = get_models().mobilenet_fp32
    kit.build("mobilenet", model)
    body = payload(np.zeros((1, 3, 128, 128), np.float32))

    def start(workdir: Path, variant: Variant) -> tuple[Daemon, dict[str, bytes]]:
        workdir.mkdir(parents=True)
        daemon = Daemon(workdir, kit.config(_config(variant, {})), (), None,
                        ("taskset", "-c", "0,1"))  # fmt: skip
        daemon.start(timeout=180)
        return daemon, {"mobilenet": body}

    yield start


def total(g: Gateway) -> float:
    return sum(p.pss for p in g)


def med(values: list[float]) -> float:
    return statistics.median(values)


_FIELDS = ("pss", "anon", "file", "rss")


def table(label: str, runs: dict[Variant, list[Gateway]]) -> str:
    """Per variant: the median gateway total, then each role's median PSS and its split."""
    lines = [f"{label}: PSS per process (MiB), median of {len(runs[1, True])} fresh starts"]
    for (count, zygote), gateways in runs.items():
        how = "" if count == 1 else ", forked" if zygote else ", exec'd"
        lines.append(f"  count={count}{how}: gateway {med([total(g) for g in gateways]):.1f}")
        for i, p in enumerate(gateways[0]):
            same = [g[i] for g in gateways if len(g) > i]
            pss, anon, file, rss = (med([getattr(q, f) for q in same]) for f in _FIELDS)
            split = f"(anon {anon:5.1f}, file {file:4.1f})"
            lines.append(f"    {p.role:<7} PSS {pss:5.1f} {split} RSS {rss:5.1f}")
    return "\n".join(lines)


FLOOR = (
    "import wasmgate.runtime.compose.worker, onnxruntime; "
    "print(open('/proc/self/smaps_rollup').read().split('Pss_Anon:')[1].split()[0])"
)
"""A worker's imports and nothing else (its data-plane modules and ONNX Runtime, which a
worker imports when it loads its first model): what any interpreter started with ``exec``
pays for itself before it loads a bundle."""


def floor_anon() -> float:
    """Anonymous PSS (MiB) of a bare interpreter after a worker's imports (median of 3)."""
    runs = [subprocess.run([sys.executable, "-c", FLOOR], capture_output=True, check=True,
                           text=True, cwd=REPO) for _ in range(3)]  # fmt: skip
    return med([int(r.stdout) / 1024 for r in runs])


def figures(label: str, runs: dict[Variant, list[Gateway]]) -> list[Figure]:
    """The goals as same-run figures, forked workers then exec'd ones: each ratio is against
    the goal's base (1 process's RSS; the 50 MB itself), so it reads against 1.5 and 1.0."""
    one = med([g[0].rss for g in runs[1, True]])
    out = []
    for zygote, how in ((True, "forked"), (False, "exec'd")):
        if (2, zygote) not in runs:
            continue
        two, three = (med([total(g) for g in runs[c, zygote]]) for c in (2, 3))
        out += [
            Figure("cores", f"{label}: 2 {how} workers, total PSS (goal <= {GOAL_RATIO}x)",
                   two, "MB", "1 process's RSS", one),
            Figure("cores", f"{label}: a 3rd {how} worker, PSS (goal <= {GOAL_WORKER_MB:.0f} MB)",
                   three - two, "MB", "goal", GOAL_WORKER_MB),
        ]  # fmt: skip
    return out


def worker_anon(runs: dict[Variant, list[Gateway]], zygote: bool) -> float:
    return med([p.anon for g in runs[2, zygote] for p in g if p.role == "worker"])


def memory_figures(quick: bool = False) -> list[Figure]:
    starts = 1 if quick else 3
    # --quick (CI: that it runs) leaves the exec'd workers out, as many starts as before.
    variants = tuple(v for v in VARIANTS if v[1]) if quick else VARIANTS
    out: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="wasmgate-mem-") as tmp:
        root = Path(tmp)
        for label, starter in (("demo", demo_starter), ("mobilenet", mobilenet_starter)):
            with starter(root / label) as start:
                runs = measure(start, root / label, starts, variants)
            print(table(label, runs), file=sys.stderr)
            out += figures(label, runs)
            if label == "demo":
                floor = floor_anon()
                for zygote, how in ((True, "forked"), (False, "exec'd")):
                    if (2, zygote) not in runs:
                        continue
                    out.append(Figure("cores", f"demo: a worker's anonymous PSS ({how})",
                                      worker_anon(runs, zygote), "MB", "its imports alone",
                                      floor))  # fmt: skip
    return out


def main() -> None:
    script_main(__doc__, memory_figures, "one start per count, forked workers only")


if __name__ == "__main__":
    main()

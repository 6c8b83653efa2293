"""The benchmark suite: every scenario, one table, one JSON file.

``python -m bench [--quick] [--json OUT] [--only NAME ...]`` (or ``wasmgate bench`` from a
source checkout). Each scenario module exposes ``run(quick) -> list[Figure]`` and keeps
its own ``__main__`` for a closer look. Every figure carries a baseline measured in the
same run on the same machine, and the ratio value / baseline.

``--quick`` only checks that every scenario runs (tiny counts; the figures mean nothing).
``--before FILE`` (default: the previous full run's JSON, when there is one) puts the
value each figure had there beside it, matched by section, scenario and name: the
previous version's figure next to the new one (for a same-session comparison, run the
suite once on the previous commit with ``--json`` and pass that file).
A scenario that fails is reported with its traceback and makes the exit status 1; the
others still run. Nothing is downloaded while measuring: the peers (MLServer,
perf_analyzer) are installed into their own venvs before their scenario starts, once.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from bench.common import Figure

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


@dataclass(frozen=True)
class Scenario:
    name: str
    module: str
    what: str


SCENARIOS = (
    Scenario("verify", "bench.bench_verify", "bundle verify/install vs sha256"),
    Scenario("oci", "bench.bench_oci", "bundle push/pull via a registry vs bare blob API"),
    Scenario("sandbox", "bench.bench_sandbox", "sandboxed adapter in-process vs raw ORT"),
    Scenario("ladder", "bench.bench_ladder", "raw ORT -> sandbox -> HTTP V2 -> MQTT, daemon"),
    Scenario("cores", "bench.bench_cores", "demo adapter vs model: 1 vs 2 CPUs, MQTT fan-in"),
    Scenario("http", "bench.bench_http", "HTTP layer alone at 1/8/32 clients vs ORT"),
    Scenario("grpc", "bench.bench_grpc", "KServe V2 gRPC vs HTTP binary, daemon (perf_analyzer)"),
    Scenario("shm", "bench.bench_shm", "system shared memory vs binary HTTP and in-process"),
    Scenario("mqtt", "bench.bench_mqtt", "MQTT stock vs NODELAY broker, requester styles"),
    Scenario("batching", "bench.bench_batching", "dynamic batching on vs off"),
    Scenario("precision", "bench.bench_precision", "INT8 vs FP32, LiteRT vs ORT"),
    Scenario("openvino", "bench.bench_openvino", "OpenVINO EP vs CPU EP (onnxruntime-openvino)"),
    Scenario("weights", "bench.bench_weights", "model weights shared by workers vs copied"),
    Scenario("daemon", "bench.bench_daemon", "cold start, hot swap, idle/loaded RSS"),
    Scenario("install", "bench.bench_install", "core install size, demo cold start without Zig"),
    Scenario("tracing", "bench.bench_tracing", "tracing off vs before, pass-through, on (OTLP)"),
    Scenario("before", "bench.bench_before", "V2 JSON, raw adapter, MQTT: this tree vs before"),
    Scenario("store", "bench.bench_store", "store-and-forward: events/s, latency while draining"),
    Scenario("fleet", "bench.bench_fleet", "fleet rollout to 3 daemons, pulls, idle member cost"),
    Scenario("peers", "bench.bench_peers", "vs bare aiohttp+ORT, MLServer (wrk); perf_analyzer"),
)


@dataclass
class Outcome:
    scenario: Scenario
    seconds: float = 0.0
    figures: list[Figure] = field(default_factory=list)
    error: str | None = None


def machine() -> dict[str, object]:
    """CPU model and count, OS and the versions that shape the figures."""
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")),
            model,
        )
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": metadata.version("onnxruntime"),
        "wasmtime": metadata.version("wasmtime"),
    }


def run_one(scenario: Scenario, quick: bool) -> Outcome:
    outcome = Outcome(scenario)
    start = time.perf_counter()
    try:
        module = importlib.import_module(scenario.module)
        outcome.figures = list(module.run(quick))
    except Exception:
        outcome.error = traceback.format_exc()
    outcome.seconds = time.perf_counter() - start
    return outcome


Key = tuple[str, str, str]


def key(section: str, f: Figure) -> Key:
    return (section, f.scenario, f.name)


def load_before(path: Path | None) -> dict[Key, float]:
    """Figure values of an earlier run's JSON (empty when there is none or it was quick)."""
    if path is None or not path.exists():
        return {}
    doc = json.loads(path.read_text())
    if doc.get("meta", {}).get("quick"):
        return {}
    return {(r["section"], r["scenario"], r["name"]): r["value"] for r in doc["figures"]}


def table(outcomes: Sequence[Outcome], before: dict[Key, float] | None = None) -> str:
    """One table for the whole run: a section row per scenario, then its figures."""
    before = before or {}
    rows = [(o.scenario.name, f) for o in outcomes for f in o.figures]
    wide = max([len(f"{f.scenario}: {f.name}") for _, f in rows] + [30])
    head = (f"{'figure':<{wide}} {'value':>14} {'baseline (same run)':>38} {'ratio':>7}"
            f" {'before':>10}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for o in outcomes:
        state = "FAILED" if o.error else f"{len(o.figures)} figures"
        lines.append(f"[{o.scenario.name}] {o.scenario.what} ({state}, {o.seconds:.0f} s)")
        for f in o.figures:
            value = f"{f.value:.4g} {f.unit}"
            base = f"{f.baseline:.4g} {f.unit} ({f.baseline_name})"
            label = f"{f.scenario}: {f.name}"
            old = before.get(key(o.scenario.name, f))
            was = "-" if old is None else f"{old:.4g}"
            lines.append(f"{label:<{wide}} {value:>14} {base:>38} {f.ratio:>7.2f} {was:>10}")
    return "\n".join(lines)


def write(
    outcomes: Sequence[Outcome], path: Path, meta: dict[str, object], before: dict[Key, float]
) -> None:
    rows = [
        {"section": o.scenario.name, **asdict(f), "ratio": f.ratio,
         "before": before.get(key(o.scenario.name, f))}
        for o in outcomes
        for f in o.figures
    ]  # fmt: skip
    sections = {
        o.scenario.name: {"seconds": round(o.seconds, 1), "error": o.error} for o in outcomes
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "sections": sections, "figures": rows}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only check every scenario runs")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"JSON output ({RESULTS})")
    names = [s.name for s in SCENARIOS]
    parser.add_argument("--only", nargs="+", choices=names, help="run only these scenarios")
    parser.add_argument("--before", type=Path, help="an earlier run's JSON for the before column")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; 0 when every scenario produced its figures, else 1."""
    args = parse(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    before = load_before(args.before or args.json)  # read before this run overwrites it
    began = time.perf_counter()
    outcomes = []
    for i, scenario in enumerate(chosen, 1):
        log(f"[{i}/{len(chosen)}] {scenario.name}: {scenario.what} ...")
        outcome = run_one(scenario, args.quick)
        outcomes.append(outcome)
        state = "FAILED" if outcome.error else f"{len(outcome.figures)} figures"
        log(f"[{i}/{len(chosen)}] {scenario.name}: {state} in {outcome.seconds:.1f} s "
            f"(total {time.perf_counter() - began:.0f} s)")  # fmt: skip
    total = time.perf_counter() - began
    command = "python -m bench" + (" --quick" if args.quick else "")
    meta = {
        "command": command,
        "quick": args.quick,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(total, 1),
        "machine": machine(),
    }
    print(f"{command}  ({meta['date']}, {total:.0f} s)")
    print(f"machine: {json.dumps(meta['machine'])}")
    print("ratio = value / baseline; latencies and sizes: lower is better, req/s: higher")
    print(table(outcomes, before))
    write(outcomes, args.json, meta, before)
    print(f"\nJSON: {args.json}")
    failed = [o for o in outcomes if o.error]
    for o in failed:
        print(f"\n{o.scenario.name} FAILED:\n{o.error}", file=sys.stderr)
    return 1 if failed else 0

"""The benchmark suite: every scenario, one table, one JSON file.

``python -m bench [--quick] [--json OUT] [--only NAME ...]`` (or ``wasmgate bench`` from a
source checkout). Each scenario module exposes ``run(quick) -> list[Figure]`` and keeps
its own ``__main__`` for a closer look. Every figure carries a baseline measured in the
same run on the same machine, and the ratio value / baseline.

``--quick`` only checks that every scenario runs (tiny counts; the figures mean nothing).
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
    Scenario("sandbox", "bench.bench_sandbox", "sandboxed adapter in-process vs raw ORT"),
    Scenario("ladder", "bench.bench_ladder", "raw ORT -> sandbox -> HTTP V2 -> MQTT, daemon"),
    Scenario("http", "bench.bench_http", "HTTP layer alone at 1/8/32 clients vs ORT"),
    Scenario("batching", "bench.bench_batching", "dynamic batching on vs off"),
    Scenario("precision", "bench.bench_precision", "INT8 vs FP32, LiteRT vs ORT"),
    Scenario("daemon", "bench.bench_daemon", "cold start, hot swap, idle/loaded RSS"),
    Scenario("peers", "bench.bench_peers", "vs Seldon MLServer 1.7; perf_analyzer"),
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


def table(outcomes: Sequence[Outcome]) -> str:
    """One table for the whole run: a section row per scenario, then its figures."""
    rows = [(o.scenario.name, f) for o in outcomes for f in o.figures]
    wide = max([len(f"{f.scenario}: {f.name}") for _, f in rows] + [30])
    head = f"{'figure':<{wide}} {'value':>14} {'baseline (same run)':>38} {'ratio':>7}"
    lines = [head, "-" * len(head)]
    for o in outcomes:
        state = "FAILED" if o.error else f"{len(o.figures)} figures"
        lines.append(f"[{o.scenario.name}] {o.scenario.what} ({state}, {o.seconds:.0f} s)")
        for f in o.figures:
            value = f"{f.value:.4g} {f.unit}"
            base = f"{f.baseline:.4g} {f.unit} ({f.baseline_name})"
            label = f"{f.scenario}: {f.name}"
            lines.append(f"{label:<{wide}} {value:>14} {base:>38} {f.ratio:>7.2f}")
    return "\n".join(lines)


def write(outcomes: Sequence[Outcome], path: Path, meta: dict[str, object]) -> None:
    rows = [
        {"section": o.scenario.name, **asdict(f), "ratio": f.ratio}
        for o in outcomes
        for f in o.figures
    ]
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
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; 0 when every scenario produced its figures, else 1."""
    args = parse(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

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
    print(table(outcomes))
    write(outcomes, args.json, meta)
    print(f"\nJSON: {args.json}")
    failed = [o for o in outcomes if o.error]
    for o in failed:
        print(f"\n{o.scenario.name} FAILED:\n{o.error}", file=sys.stderr)
    return 1 if failed else 0

"""Shared benchmark helpers: timing, medians, percentiles and the same-run ratio table."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Figure:
    """One measured figure and the baseline it is compared with (same run, same machine)."""

    scenario: str
    name: str
    value: float
    unit: str
    baseline_name: str
    baseline: float
    lower_is_better: bool = True

    @property
    def ratio(self) -> float:
        """value / baseline (for latencies: how many times slower than the baseline)."""
        return self.value / self.baseline if self.baseline else float("nan")


def timed(fn: Callable[[], object], *, repeat: int, warmup: int = 3) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def format_table(figures: Sequence[Figure]) -> str:
    """A fixed-width table: scenario, figure, value, baseline, ratio."""
    header = f"{'scenario':<14} {'figure':<34} {'value':>12} {'baseline':>30} {'ratio':>7}"
    lines = [header, "-" * len(header)]
    for f in figures:
        base = f"{f.baseline:.4g} {f.unit} ({f.baseline_name})"
        lines.append(
            f"{f.scenario:<14} {f.name:<34} {f.value:>9.4g} {f.unit:<2} {base:>30} {f.ratio:>7.2f}"
        )
    return "\n".join(lines)


def write_json(figures: Sequence[Figure], path: Path, meta: dict[str, object]) -> None:
    """Write the figures plus machine facts as JSON (ratios included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(f), "ratio": f.ratio} for f in figures]
    path.write_text(json.dumps({"meta": meta, "figures": rows}, indent=2))


def script_main(doc: str | None, run: Callable[[bool], Sequence[Figure]], quick_help: str) -> None:
    """The ``__main__`` of a bench module: ``--quick``, ``--json OUT``, print the table."""
    import argparse  # noqa: PLC0415 - only scripts need it
    import os  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    figures = run(args.quick)
    print(format_table(figures))
    if args.json:
        write_json(figures, args.json, {"cpus": os.cpu_count()})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (``/proc/<pid>/stat`` fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

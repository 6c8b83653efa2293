"""``python -m bench --quick`` runs every scenario of the suite (figures not judged: CI only
checks that each scenario still runs end to end against real daemons, brokers and peers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.suite import SCENARIOS
from tests.fixtures.models import REPO


# Hang guards only: the quick suite took ~8 min at load 12-16 on the 2-core CI VM (560 s
# was too close); figures are never judged here.
@pytest.mark.timeout(1260)
def test_quick_suite_runs_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    doc = json.loads(out.read_text())
    sections = doc["sections"]
    assert set(sections) == {s.name for s in SCENARIOS}
    assert not [name for name, s in sections.items() if s["error"]]
    with_figures = {row["section"] for row in doc["figures"]}
    # A peer may be skipped only when its one-time install is not cached; then it says so.
    skipped = [ln for ln in done.stdout.splitlines() if ln.startswith("bench_peers: skipping")]
    expected = {s.name for s in SCENARIOS} - ({"peers"} if len(skipped) == 2 else set())
    if any(ln.startswith("bench_grpc: skipping") for ln in done.stdout.splitlines()):
        expected -= {"grpc"}  # perf_analyzer drives it; same one-time install as the peers
    if any(ln.startswith("bench_before: skipping") for ln in done.stdout.splitlines()):
        expected -= {"before"}  # no earlier tree to compare with (a shallow clone)
    assert expected <= with_figures, (expected - with_figures, skipped)
    assert "ratio" in done.stdout
    assert all(row["baseline"] == row["baseline"] for row in doc["figures"])  # no NaN

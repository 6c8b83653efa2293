"""docs/benchmarks.md says what every scenario of the suite needs: a scenario added to
`bench.suite.SCENARIOS` without a row there fails here."""

from __future__ import annotations

from pathlib import Path

from bench.suite import SCENARIOS

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_every_scenario_has_a_row() -> None:
    rows = {
        line.split("|")[1].strip().strip("`")
        for line in DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `")
    }
    assert rows == {s.name for s in SCENARIOS}

"""``wasmgate bench``: runs the suite from a source checkout, refuses clearly elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.models import REPO
from wasmgate.runtime.cli import bench as bench_cli
from wasmgate.runtime.cli import main


def test_finds_this_checkout() -> None:
    assert bench_cli._checkout() == REPO


def test_outside_a_checkout_points_at_python_m_bench(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_cli, "_checkout", lambda: None)
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "not part of the installed package" in err
    assert "python -m bench" in err


def test_passes_options_to_the_suite(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[list[str]] = []
    import bench.suite  # noqa: PLC0415

    def fake_main(argv: list[str]) -> int:
        seen.append(list(argv))
        return 0

    monkeypatch.setattr(bench.suite, "main", fake_main)
    out = tmp_path / "x.json"
    assert main(["bench", "--quick", "--json", str(out), "--only", "verify"]) == 0
    assert seen == [["--quick", "--json", str(out), "--only", "verify"]]

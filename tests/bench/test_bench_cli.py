"""``wasmgate bench``: runs the suite from a source checkout, refuses clearly elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.models import REPO
from wasmgate.runtime.cli import bench as bench_cli
from wasmgate.runtime.cli import main


def test_finds_this_checkout() -> None:
    assert bench_cli.checkout() == REPO


def test_outside_a_checkout_points_at_python_m_bench(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_cli, "checkout", lambda: None)
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "not part of the installed package" in err
    assert "python -m bench" in err


def test_runs_the_suite_as_a_child_process_in_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The installed package never imports bench/: it starts `python -m bench` there.
    seen: list[tuple[Path, list[str]]] = []

    def fake_suite(root: Path, argv: list[str]) -> int:
        seen.append((root, argv))
        return 3

    monkeypatch.setattr(bench_cli, "run_suite", fake_suite)
    out = tmp_path / "x.json"
    assert main(["bench", "--quick", "--json", str(out), "--only", "verify"]) == 3
    assert seen == [(REPO, ["--quick", "--json", str(out), "--only", "verify"])]


def test_the_suite_child_reports_its_exit_code() -> None:
    assert bench_cli.run_suite(REPO, ["--only", "no-such-scenario"]) != 0

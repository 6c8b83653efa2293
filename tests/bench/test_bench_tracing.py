"""`bench_tracing`'s "before" daemon: an older tree that cannot start costs its figures only."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_tracing
from tests.fixtures.models import get_models


def _broken_site(root: Path) -> Path:
    # What an old tree looks like in an environment that no longer installs its packages.
    package = root / "site" / "wasmgate"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import pydantic_settings_gone_from_this_venv\n")
    return root / "site"


@pytest.mark.timeout(300)
def test_a_before_daemon_that_cannot_start_leaves_out_only_its_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_tracing, "before_site", _broken_site)
    with bench_tracing.daemons(tmp_path, get_models().digits_fp32, before=True) as started:
        assert sorted(started) == ["off", "on"]
        assert all(d.proc is not None and d.proc.poll() is None for d in started.values())
    assert "the 'before' daemon did not start (ModuleNotFoundError" in capsys.readouterr().out

"""docs/grpc.md's perf_analyzer install pins what `bench.peers` installs and CI runs."""

from __future__ import annotations

from pathlib import Path

from bench import peers

DOC = Path(__file__).resolve().parents[2] / "docs" / "grpc.md"


def test_the_doc_installs_the_benchs_perf_analyzer() -> None:
    text = DOC.read_text(encoding="utf-8")
    (install,) = [ln for ln in text.splitlines() if "/bin/pip install" in ln]
    pins = install.split("/bin/pip install ", 1)[1].replace("'", "").split()
    assert pins == list(peers.PERF_ANALYZER.requirements)
    assert "apt-get install libb64-0d" in text  # what peers.missing_system_libs asks for

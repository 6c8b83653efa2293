"""``perf_analyzer -i grpc`` (and ``-i http``, the same run) against a real daemon."""

from __future__ import annotations

import pytest

from bench import bench_grpc
from bench.peers import PERF_ANALYZER


@pytest.mark.timeout(900)
def test_perf_analyzer_drives_grpc_beside_http() -> None:
    PERF_ANALYZER.ensure()  # once per machine (cached); never skipped silently
    figures = bench_grpc.run(quick=True)
    assert [f.name for f in figures] == ["p50, 1 client", "req/s, 1 client", "req/s, 8 clients"]
    for figure in figures:
        # perf_analyzer exits non-zero on any failed request, so these are all answers
        assert figure.value > 0, figure
        assert figure.baseline > 0, figure
        assert figure.baseline_name == "HTTP binary"

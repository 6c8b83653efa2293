"""Metric gates of staged releases: a failing candidate is aborted, a healthy one promoted.

Real daemon subprocess, one-second observation windows; each test sends keyed requests
until the decision (bounded by a time limit), then checks the numbers everywhere they are
reported (``/v1/bundles``, ``/v1/status``, ``/metrics``, the log) and that the decision
holds across a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.runtime.bundlekit import BundleKit
from tests.runtime.bundles.releases import entry, metric, put, start, until_decided
from wasmgate.runtime.bundles.release import Measured, judge
from wasmgate.signing.errors import ManifestError
from wasmgate.signing.manifest import Release


@pytest.fixture
def daemon(kit: BundleKit, tmp_path: Path, daemon_factory: Callable[..., Daemon]) -> Daemon:
    daemon = start(daemon_factory, kit, tmp_path)
    assert put(daemon, kit.build("probe", 1))[0] == 201
    return daemon


@pytest.mark.timeout(240)
def test_a_failing_candidate_is_aborted_by_its_gate(daemon: Daemon, kit: BundleKit) -> None:
    broken = kit.build("probe", 2, sections={"params": {"broken": True}})
    gates = {"min_requests": 10, "max_error_share": 0.2, "window_s": 1}
    assert put(daemon, broken, stage=50, **gates)[0] == 201
    found = until_decided(daemon)
    assert found["version"] == 1
    release = found["release"]
    assert (release["outcome"], release["version"]) == ("abort", 2)
    assert release["measured"]["requests"] >= 10
    assert release["measured"]["error_share"] == 1.0
    assert "error share 1.0000 > 0.2" in release["reasons"][0]
    status = daemon.get_json("/v1/status")["components"]["bundles"]["serving"]
    assert status[0]["release"]["outcome"] == "abort"
    assert metric(daemon, 'wasmgate_release_decisions_total{bundle="probe",outcome="abort"}') == 1
    assert metric(daemon, 'wasmgate_release_measured{bundle="probe",measure="error_share"}') == 1
    assert "gates abort probe@2: error share 1.0000 > 0.2 (requests=" in daemon.log()
    # the floor did not move: v1 installs again, and after a restart only v1 serves
    assert put(daemon, kit.root / "probe-1.wgb")[0] == 201
    daemon.kill()
    daemon.start()
    assert "staged" not in entry(daemon)


@pytest.mark.timeout(240)
def test_a_healthy_candidate_is_promoted(daemon: Daemon, kit: BundleKit) -> None:
    declared = {"release": {"max_error_share": 0.05, "window_s": 1}}
    healthy = kit.build("probe", 2, sections=declared)
    # the operator's looser share cannot loosen the manifest's; its min_requests tightens
    loose = {"min_requests": 10, "max_error_share": 0.5, "max_p99_ratio": 1000}
    assert put(daemon, healthy, stage=50, **loose)[0] == 201
    gates = entry(daemon)["staged"]["gates"]
    assert gates == {
        "min_requests": 10, "max_error_share": 0.05, "max_p99_ratio": 1000.0, "window_s": 1.0
    }  # fmt: skip
    found = until_decided(daemon)
    assert (found["version"], found["release"]["outcome"]) == (2, "promote")
    assert found["release"]["measured"]["errors"] == 0
    assert metric(daemon, 'wasmgate_release_decisions_total{bundle="probe",outcome="promote"}') == 1
    daemon.kill()
    daemon.start()
    assert entry(daemon)["version"] == 2
    status, body = put(daemon, kit.root / "probe-1.wgb")
    assert status == 422
    assert "rollback" in body["error"]


def test_gate_parameters_are_checked(daemon: Daemon, kit: BundleKit) -> None:
    two = kit.build("probe", 2)
    for bad in ({"max_error_share": "2"}, {"window_s": "-1"}, {"min_requests": "1.5"},
                {"max_p99_ratio": "nan"}):  # fmt: skip
        status, body = put(daemon, two, stage=10, **bad)
        assert status == 400, body
        assert "bad metric gate" in body["error"]
    status, body = put(daemon, two, max_error_share=0.1)
    assert status == 400
    assert "staged install only" in body["error"]
    assert "staged" not in entry(daemon)


def test_unknown_release_fields_are_refused(kit: BundleKit) -> None:
    with pytest.raises(ManifestError, match=r"release\.max_errors"):
        kit.build("probe", 3, sections={"release": {"max_errors": 1}})


def _measured(requests: int, errors: int, ratio: float | None) -> Measured:
    share = errors / requests if requests else None
    return Measured(requests, errors, share, None, None, ratio)


@pytest.mark.parametrize(
    ("gates", "measured", "outcome"),
    [
        (Release(min_requests=5, max_error_share=0.1), _measured(4, 0, None), None),
        (Release(max_error_share=0.1), _measured(0, 0, None), None),
        (Release(window_s=1), _measured(0, 0, None), "promote"),
        (Release(max_error_share=0.1), _measured(10, 1, None), "promote"),
        (Release(max_error_share=0.1), _measured(10, 2, None), "abort"),
        (Release(max_p99_ratio=1.5), _measured(10, 0, 1.6), "abort"),
        (Release(max_p99_ratio=1.5), _measured(10, 0, None), "promote"),
    ],
)
def test_judge(gates: Release, measured: Measured, outcome: str | None) -> None:
    verdict = judge(gates, "probe", 2, measured)
    assert (verdict.outcome if verdict else None) == outcome


def test_the_operator_can_only_tighten() -> None:
    declared = Release(min_requests=100, max_error_share=0.01, max_p99_ratio=2, window_s=60)
    operator = Release(min_requests=10, max_error_share=0.5, max_p99_ratio=1.2, window_s=600)
    assert declared.tightened(operator) == Release(
        min_requests=100, max_error_share=0.01, max_p99_ratio=1.2, window_s=600
    )
    assert Release().tightened(operator) == operator

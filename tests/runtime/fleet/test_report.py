"""The deployment report (FLEET.md format), its publishing on change, and the fleet metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.fleet.reconcilekit import Shelf, document, done, reconciler, settled
from tests.runtime.stack import open_stack
from wasmgate.runtime.errors import DocumentRefused
from wasmgate.runtime.fleet.report import Reporter


def sample(exposition: bytes, line: str) -> float | None:
    for row in exposition.decode().splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return None


async def test_report_format_local_bundles_refusals_and_metrics(
    tmp_path: Path, shelf: Shelf
) -> None:
    local = shelf.kit.build("mine", 1, model=False, sections={"routes": {"http": "mine"}})
    sent: list[dict[str, Any]] = []
    async with open_stack(tmp_path, shelf.kit, start=(local,)) as st, reconciler(st, shelf) as rec:
        reporter = Reporter(rec, st.registry, "gw-1", ("g1",), st.metrics)
        reporter.attach(lambda payload: sent.append(json.loads(payload)))
        assert sent[-1]["serial"] is None
        assert sent[-1]["bundles"]["mine"]["state"] == "local"
        await rec.offer(document(3, shelf.put("probe", 1)), "test")
        await settled(rec, done)
        report = reporter.document()
        assert sent[-1] == report
        assert set(report) == {
            "format", "gateway", "groups", "serial", "state", "reason", "refused",
            "last_failure", "bundles", "time",
        }  # fmt: skip
        assert report["format"] == "wasmgate-deployment/1"
        assert (report["gateway"], report["groups"], report["serial"]) == ("gw-1", ["g1"], 3)
        assert (report["state"], report["reason"], report["refused"]) == ("applied", None, None)
        probe = report["bundles"]["probe"]
        assert probe == {
            "version": 1,
            "digest": "sha256:" + f"{1:064x}",
            "state": "applied",
            "error": None,
            "staged_percent": None,
            "downgraded_from": None,
        }
        assert report["bundles"]["mine"]["state"] == "local"
        assert report["time"].endswith("Z")
        with pytest.raises(DocumentRefused):
            await rec.offer(document(2), "test")
        assert sent[-1]["refused"] == {"serial": 2, "error": sent[-1]["refused"]["error"]}
        assert sent[-1]["refused"]["error"].startswith("FleetReplayError: ")
        assert sent[-1]["state"] == "applied"  # a refusal changes nothing else
        exposition, _ = st.metrics.exposition()
        assert sample(exposition, "wasmgate_fleet_serial") == 3
        state = 'wasmgate_fleet_bundle_state{bundle="probe",state="applied"}'
        assert sample(exposition, state) == 1
        assert sample(exposition, 'wasmgate_fleet_bundle_state{bundle="mine",state="local"}') == 1
        refusals = 'wasmgate_fleet_refusals_total{error="FleetReplayError"}'
        assert sample(exposition, refusals) == 1
        count = len(sent)
        reporter.changed()  # nothing changed: nothing is sent again
        assert len(sent) == count
        reporter.close()

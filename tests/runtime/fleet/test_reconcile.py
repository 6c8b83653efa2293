"""Reconciler over a real registry and store: per-bundle outcomes, retries, refusals, state.

Verification and transport are stand-ins (``reconcilekit``); ``test_daemon_*`` runs the real
ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.fleet.reconcilekit import (
    Shelf,
    document,
    done,
    reconciler,
    serving,
    settled,
    want,
)
from tests.runtime.stack import open_stack
from wasmgate.runtime.errors import DocumentRefused
from wasmgate.runtime.fleet.reconcile import LastFailure, Reconciler, Refusal
from wasmgate.runtime.fleet.state import FleetRecord, FleetStateFile
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.signing.errors import FleetDowngradeError, FleetReplayError


async def test_installs_removes_and_leaves_local_bundles_alone(
    tmp_path: Path, shelf: Shelf
) -> None:
    kit = shelf.kit
    local = kit.build("mine", 1, model=False, sections={"routes": {"http": "mine"}})
    async with open_stack(tmp_path, kit, start=(local,)) as st, reconciler(st, shelf) as rec:
        probe = shelf.put("probe", 1)
        other = shelf.put("other", 1, model=False, sections={"routes": {"http": "echo"}})
        assert await rec.offer(document(1, probe, other), "test")
        await settled(rec, done)
        assert rec.state == "applied"
        assert serving(st) == {"mine": 1, "probe": 1, "other": 1}
        assert set(rec.record.owned) == {"probe", "other"}
        await rec.offer(document(2, probe), "test")
        await settled(rec, lambda r: r.record.serial == 2 and done(r))
        assert serving(st) == {"mine": 1, "probe": 1}  # other removed, mine untouched
        assert rec.bundles["other"].state == "removed"
        assert rec.record.owned == ("probe",)
        await rec.offer(document(3), "test")  # the fleet wants nothing: only its own goes
        await settled(rec, lambda r: r.record.serial == 3 and done(r))
        assert serving(st) == {"mine": 1}


async def test_a_failed_bundle_keeps_its_old_version_and_others_still_apply(
    tmp_path: Path, shelf: Shelf
) -> None:
    kit = shelf.kit
    async with open_stack(tmp_path, kit) as st, reconciler(st, shelf) as rec:
        await rec.offer(document(1, shelf.put("probe", 1)), "test")
        await settled(rec, done)
        bad = shelf.put("probe", 2, selftest=b"E")  # the guest answers status 2
        other = shelf.put("other", 1, model=False, sections={"routes": {"http": "echo"}})
        await rec.offer(document(2, bad, other), "test")
        await settled(rec, lambda r: r.record.serial == 2 and done(r))
        assert rec.state == "failed"
        assert rec.bundles["probe"].state == "failed"
        assert "selftest" in (rec.bundles["probe"].error or "")
        assert rec.bundles["other"].state == "applied"
        answer = await st.service.run_adapter(AdapterRequest("probe", b"M"))
        assert answer.version == 1


def _failure(rec: Reconciler) -> LastFailure | None:
    return rec.last_failure  # (read afresh: mypy keeps an attribute narrowed by an assert)


async def test_a_failure_outlives_the_rollback_until_the_bundle_applies(
    tmp_path: Path, shelf: Shelf
) -> None:
    """The rollback document (the previous set) applies, but the gateway still reports the
    failed bundle with its whole error; a later document applying that bundle clears it."""
    kit = shelf.kit
    async with open_stack(tmp_path, kit) as st, reconciler(st, shelf) as rec:
        good = shelf.put("probe", 1)
        await rec.offer(document(1, good), "test")
        await settled(rec, done)
        assert _failure(rec) is None
        await rec.offer(document(2, shelf.put("probe", 2, selftest=b"E")), "test")
        await settled(rec, lambda r: r.record.serial == 2 and done(r))
        kept = _failure(rec)
        assert kept is not None
        assert (kept.serial, kept.bundle, kept.version) == (2, "probe", 2)
        assert "selftest" in kept.error
        await rec.offer(document(3, good), "test")  # the rollback: v1 serves on
        await settled(rec, lambda r: r.record.serial == 3 and done(r))
        assert rec.state == "applied"
        assert _failure(rec) == kept
        await rec.offer(document(4, shelf.put("probe", 3)), "test")
        await settled(rec, lambda r: r.record.serial == 4 and done(r))
        assert rec.state == "applied"
        assert _failure(rec) is None


async def test_registry_down_is_pending_with_reason_then_converges(
    tmp_path: Path, shelf: Shelf
) -> None:
    kit = shelf.kit
    async with open_stack(tmp_path, kit) as st, reconciler(st, shelf) as rec:
        shelf.down = True
        await rec.offer(document(1, shelf.put("probe", 1)), "test")
        await settled(rec, lambda _: len(shelf.pulls) >= 3)  # retried, not given up
        assert (rec.state, rec.reason) == ("pending", "registry unreachable: connection refused")
        assert rec.bundles["probe"].state == "pending"
        assert serving(st) == {}
        shelf.down = False
        await settled(rec, done)
        assert rec.state == "applied"
        assert serving(st) == {"probe": 1}


async def test_refused_documents_change_nothing(tmp_path: Path, shelf: Shelf) -> None:
    kit = shelf.kit
    async with open_stack(tmp_path, kit) as st, reconciler(st, shelf) as rec:
        first = document(5, shelf.put("probe", 2))
        await rec.offer(first, "test")
        await settled(rec, done)
        before = rec.record
        assert not await rec.offer(first, "mqtt")  # the same bytes again: no news, no refusal
        assert [rec.refused] == [None]
        older = document(4, shelf.put("probe", 1))
        expired = document(6, shelf.put("other", 1), expired=True)
        lower = document(7, want("probe", 1))  # below the serving 2, no downgrade granted
        cases = [(older, "FleetReplayError"), (expired, "FleetExpiredError")]
        cases.append((lower, "FleetDowngradeError"))
        for doc, error in cases:
            with pytest.raises(DocumentRefused, match=error):
                await rec.offer(doc, "test")
            assert rec.refused is not None
            assert rec.refused.error.startswith(error)
            assert rec.record == before
            assert FleetStateFile(st.state_dir).load() == before
        assert serving(st) == {"probe": 2}
        assert rec.state == "applied"


async def test_staged_percent_stages_then_a_later_document_promotes(
    tmp_path: Path, shelf: Shelf
) -> None:
    kit = shelf.kit
    async with open_stack(tmp_path, kit) as st, reconciler(st, shelf) as rec:
        v1, v2 = shelf.put("probe", 1), shelf.put("probe", 2)
        await rec.offer(document(1, v1), "test")
        await settled(rec, done)
        await rec.offer(document(2, {**v2, "staged_percent": 30}), "test")
        await settled(rec, lambda r: r.record.serial == 2 and done(r))
        slot = st.registry.table.slot("probe")
        assert (slot.current.version, slot.candidate and slot.candidate.version) == (1, 2)
        assert slot.percent == 30
        assert rec.bundles["probe"].staged_percent == 30
        await rec.offer(document(3, v2), "test")
        await settled(rec, lambda r: r.record.serial == 3 and done(r))
        slot = st.registry.table.slot("probe")
        assert (slot.current.version, slot.candidate) == (2, None)


async def test_state_survives_a_restart_and_the_interrupted_plan_resumes(
    tmp_path: Path, shelf: Shelf
) -> None:
    kit = shelf.kit
    state = tmp_path / "state"
    async with open_stack(tmp_path, kit, state_dir=state) as st, reconciler(st, shelf) as rec:
        shelf.down = True  # accepted, then "killed" before anything could be pulled
        await rec.offer(document(9, shelf.put("probe", 1)), "test")
        await settled(rec, lambda r: r.state == "pending")
    shelf.down = False
    async with open_stack(tmp_path, kit, state_dir=state) as st, reconciler(st, shelf) as rec:
        assert rec.record.serial == 9
        await settled(rec, done)  # resumed without the document being sent again
        assert serving(st) == {"probe": 1}
        with pytest.raises(DocumentRefused, match="FleetReplayError"):
            await rec.offer(document(8, shelf.put("other", 1)), "test")
    async with open_stack(tmp_path, kit, state_dir=state) as st, reconciler(st, shelf) as rec:
        assert rec.record.owned == ("probe",)
        await rec.offer(document(10), "test")
        await settled(rec, lambda r: r.record.serial == 10 and done(r))
        assert serving(st) == {}  # the fleet still knew it had installed probe


async def test_a_granted_downgrade_installs_the_lower_version(tmp_path: Path, shelf: Shelf) -> None:
    async with open_stack(tmp_path, shelf.kit) as st, reconciler(st, shelf) as rec:
        v1, v2 = shelf.put("probe", 1), shelf.put("probe", 2)
        await rec.offer(document(1, v2), "test")
        await settled(rec, done)
        await rec.offer(document(2, v1, downgrades={"probe": 1}), "test")
        await settled(rec, lambda r: r.record.serial == 2 and done(r))
        assert (rec.state, serving(st)) == ("applied", {"probe": 1})
        assert st.store.floors() == {"probe": 1}  # the floor went down with it, signed
        assert rec.bundles["probe"].downgraded_from == 2  # reported


async def test_an_unexpected_error_is_pending_and_retried_not_the_end_of_the_fleet(
    tmp_path: Path, shelf: Shelf, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_stack(tmp_path, shelf.kit) as st, reconciler(st, shelf) as rec:
        await rec.offer(document(1), "test")  # saved while the disk still works
        await settled(rec, done)
        save, failures = FleetStateFile.save, [OSError(28, "No space left on device")]

        def flaky(self: FleetStateFile, record: FleetRecord) -> None:
            if failures and record.owned:
                raise failures.pop()
            save(self, record)

        monkeypatch.setattr(FleetStateFile, "save", flaky)
        await rec.offer(document(2, shelf.put("probe", 1)), "test")
        await settled(rec, lambda r: r.state == "pending")
        assert "No space left on device" in (rec.reason or "")
        await settled(rec, lambda r: r.record.serial == 2 and done(r))  # retried, converged
        assert (rec.state, serving(st), rec.record.owned) == ("applied", {"probe": 1}, ("probe",))


async def test_judge_weighs_a_document_as_offer_would_and_records_nothing(
    tmp_path: Path, shelf: Shelf
) -> None:
    async with open_stack(tmp_path, shelf.kit) as st, reconciler(st, shelf) as rec:
        first = document(5, shelf.put("probe", 2))
        await rec.offer(first, "test")
        await settled(rec, done)
        before = rec.record
        assert await rec.judge(first) == 5  # the accepted one: its own serial, no replay
        assert await rec.judge(document(9, shelf.put("probe", 2))) == 9
        lower = document(7, want("probe", 1))  # a downgrade without permission
        for doc, error in [(document(4), FleetReplayError), (lower, FleetDowngradeError)]:
            with pytest.raises(error):
                await rec.judge(doc)
        assert (rec.refused, rec.record) == (None, before)  # judged, not refused
        seen: list[Refusal] = []
        rec.on_refusal.append(seen.append)
        rec.refuse(lower, "mqtt topic", FleetDowngradeError("probe", "below"))
        assert rec.refused is not None
        assert rec.refused.serial == 7
        assert seen == [rec.refused]
        assert rec.record == before


async def test_a_new_document_never_reports_the_previous_outcomes_under_its_serial(
    tmp_path: Path, shelf: Shelf
) -> None:
    """Issue 53: the "applying" of serial 2 listed serial 1's bundles as applied (v1), one
    report per gateway per document that said nothing true; at 10,000 gateways, 20,000
    messages a rollout."""
    async with open_stack(tmp_path, shelf.kit) as st, reconciler(st, shelf) as rec:
        await rec.offer(document(1, shelf.put("probe", 1)), "test")
        await settled(rec, done)
        seen: list[tuple[int | None, str | None, dict[str, tuple[int, str]]]] = []

        def note() -> None:
            bundles: dict[str, tuple[int, str]] = {
                n: (b.version, b.state) for n, b in rec.bundles.items()
            }
            state: str | None = rec.state
            seen.append((rec.record.serial, state, bundles))

        rec.on_change.append(note)
        await rec.offer(document(2, shelf.put("probe", 2)), "test")
        await settled(rec, lambda r: done(r) and r.record.serial == 2)
        under_2 = [bundles for serial, _state, bundles in seen if serial == 2]
        assert under_2[0] == {"probe": (2, "applying")}, seen
        assert all(b["probe"][0] == 2 for b in under_2), seen
        assert seen[-1] == (2, "applied", {"probe": (2, "applied")})

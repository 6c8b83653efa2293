"""Waiting for a wave: each gateway's verdict on a serial, read from its retained report.

The rollout (`driver.py`) publishes a wave's documents, then waits here until every gateway
of the wave reported that serial with a final state, refused it, or the wave timeout
passed (a late gateway is a failed one). Each gateway's finish fills its `Row` of the final
table and is passed to the CLI's progress bar. During the rollout the new bundle's own
outcome decides; during a rollback, the whole report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wasmgate.runtime.fleet.opclient import OperatorClient
from wasmgate.runtime.fleet.rollout import Outcome, Wanted
from wasmgate.runtime.fleet.status import FINAL, Report, parse_report


@dataclass
class Row:
    """One line of the final table."""

    gateway: str
    wave: int
    state: str = "untouched"
    version: int | None = None
    error: str | None = None


Progress = Callable[[Row], None]
"""Called once per gateway when it finished a wave (the CLI's progress bar)."""


class WaveWatch:
    """Waits for the verdicts of the gateways under ``root`` on one client."""

    def __init__(self, client: OperatorClient, root: str, progress: Progress) -> None:
        self._client = client
        self._root = root
        self._progress = progress
        self._parsed: dict[str, tuple[bytes, Report | None]] = {}

    def _report(self, gw: str, messages: dict[str, bytes]) -> Report | None:
        """The gateway's latest report, parsed once per payload."""
        payload = messages.get(f"{self._root}/{gw}/deployment", b"")
        cached = self._parsed.get(gw)
        if cached is None or cached[0] is not payload:
            cached = (payload, parse_report(payload))
            self._parsed[gw] = cached
        return cached[1]

    def wait(
        self,
        gateways: list[str],
        serial: int,
        new: Wanted,
        timeout_s: float,
        rows: dict[str, Row],
        *,
        final: bool,
    ) -> dict[str, Outcome]:
        """Wait for the gateways' verdicts on ``serial``; fills ``rows`` as each finishes."""
        pending = set(gateways)
        outcomes: dict[str, Outcome] = {}
        topics = {f"{self._root}/{gw}/deployment": gw for gw in gateways}
        first = [True]

        def settle(messages: dict[str, bytes], changed: set[str]) -> bool:
            # every gateway once, then only those whose report changed: O(messages), not
            # O(messages x pending) (a last wave of 90,000 was hours of CPU)
            look = list(pending) if first[0] else [topics[t] for t in changed if t in topics]
            first[0] = False
            for gw in look:
                if gw not in pending:
                    continue
                report = self._report(gw, messages)
                outcome = _verdict(report, serial, new, rows[gw], rollout=final)
                if outcome is not None:
                    pending.discard(gw)
                    outcomes[gw] = outcome
                    _label(rows[gw], outcome, rollout=final)
                    self._progress(rows[gw])
            return not pending

        self._client.wait_for_changes(settle, timeout_s)
        for gw in sorted(pending):  # a late gateway is a failed one (the rules say so)
            outcomes[gw] = Outcome.TIMEOUT
            rows[gw].error = rows[gw].error or f"no report for serial {serial} in time"
            _label(rows[gw], Outcome.TIMEOUT, rollout=final)
            self._progress(rows[gw])
        return outcomes


def _verdict(
    report: Report | None, serial: int, new: Wanted, row: Row, *, rollout: bool
) -> Outcome | None:
    """How the gateway finished ``serial``, or None while it has not; notes version/error.

    During the rollout the new bundle's own outcome decides: another bundle failing on that
    gateway is not this rollout's failure. A rollback needs the whole report, and keeps the
    rollout's error in the row unless the rollback has one of its own.
    """
    if report is None:
        return None
    if report.refused is not None and report.refused.serial == serial:
        row.error = report.refused.error
        return Outcome.FAILED
    if report.serial is None or report.serial < serial or report.state not in FINAL:
        return None
    bundle = report.bundles.get(new.name)
    present = bundle is not None and bundle.state != "removed"
    row.version = bundle.version if bundle is not None and present else None
    error = (bundle.error if bundle is not None else None) or report.reason
    row.error = error or (None if rollout else row.error)
    if rollout:
        ok = bundle is not None and bundle.state == "applied" and bundle.version == new.version
        return Outcome.APPLIED if ok else Outcome.FAILED
    return Outcome.APPLIED if report.state == "applied" else Outcome.FAILED


def _label(row: Row, outcome: Outcome, *, rollout: bool) -> None:
    """The row's state: the outcome's name, or what became of the rollback."""
    if rollout:
        row.state = outcome.value
    else:
        row.state = "rolled back" if outcome is Outcome.APPLIED else f"rollback {outcome.value}"

"""Metric gates of a staged release: watch the candidate, then promote or abort it.

The gates (`wasmgate.signing.manifest.Release`: the manifest's ``[release]`` table, tightened
by the operator's stage request) are judged once ``window_s`` has passed since the candidate
started serving and at least ``min_requests`` (default 1) reached it: its error share
against ``max_error_share``, its p99 latency over the serving version's p99 against
``max_p99_ratio``. All gates hold → promote; one fails → abort. Fewer requests than needed
→ keep watching (a release with no traffic is neither promoted nor aborted).

The measurements are the versions' in-memory `Outcomes`, so after a restart the window
starts again (the candidate and its gates are durable, the numbers are not).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.manifest import Release
from wasmgate.typed import plain

log = logging.getLogger("wasmgate.release")

DEFAULT_WINDOW_S = 300.0
RECHECK_S = 1.0
"""How often a window that passed without enough requests is judged again."""


class Measured(msgspec.Struct, frozen=True):
    """The candidate's numbers (and the serving version's p99) at one moment."""

    requests: int
    errors: int
    error_share: float | None
    p99_ms: float | None
    current_p99_ms: float | None
    p99_ratio: float | None


class Verdict(msgspec.Struct, frozen=True):
    """A gate decision: promote or abort, why, and on which numbers."""

    name: str
    version: int
    outcome: Literal["promote", "abort"]
    reasons: list[str]
    measured: Measured
    at: float = msgspec.field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = plain(self)  # JSON values, as `dataclasses.asdict` gave here
        return doc

    def message(self) -> str:
        m = self.measured
        numbers = (
            f"requests={m.requests} errors={m.errors} error_share={m.error_share} "
            f"p99_ms={m.p99_ms} current_p99_ms={m.current_p99_ms} p99_ratio={m.p99_ratio}"
        )
        why = "; ".join(self.reasons) if self.reasons else "all gates hold"
        return f"gates {self.outcome} {self.name}@{self.version}: {why} ({numbers})"


def measure(candidate: LoadedBundle, current: LoadedBundle) -> Measured:
    out = candidate.outcomes
    p99, ref = out.p99(), current.outcomes.p99()
    return Measured(
        requests=out.requests,
        errors=out.errors,
        error_share=out.errors / out.requests if out.requests else None,
        p99_ms=None if p99 is None else p99 * 1e3,
        current_p99_ms=None if ref is None else ref * 1e3,
        p99_ratio=p99 / ref if p99 is not None and ref else None,
    )


def judge(gates: Release, name: str, version: int, m: Measured) -> Verdict | None:
    """The verdict on ``m``, or None while fewer requests than the gates need arrived."""
    metric_gates = gates.max_error_share is not None or gates.max_p99_ratio is not None
    if m.requests < (gates.min_requests or (1 if metric_gates else 0)):
        return None
    reasons = []
    share, ratio = m.error_share or 0.0, m.p99_ratio
    if gates.max_error_share is not None and share > gates.max_error_share:
        reasons.append(f"error share {share:.4f} > {gates.max_error_share}")
    # no p99 of the serving version (no traffic on it): the ratio is unknown, not failed
    if gates.max_p99_ratio is not None and ratio is not None and ratio > gates.max_p99_ratio:
        reasons.append(f"p99 ratio {ratio:.3f} > {gates.max_p99_ratio}")
    return Verdict(name, version, "abort" if reasons else "promote", reasons, m)


OnVerdict = Callable[[Verdict, LoadedBundle], Awaitable[None]]
Lookup = Callable[[str], tuple[LoadedBundle, LoadedBundle | None] | None]


class Watches:
    """One watch task per staged candidate with gates; owned (and closed) by the registry."""

    def __init__(self, lookup: Lookup, on_verdict: OnVerdict) -> None:
        self._lookup = lookup
        """name -> (current, candidate) now, or None when the name is gone."""
        self._on_verdict = on_verdict
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, candidate: LoadedBundle, gates: Release) -> None:
        self.stop(name)
        task = asyncio.get_running_loop().create_task(self._watch(name, candidate, gates))
        self._tasks[name] = task

    def stop(self, name: str) -> None:
        """Stop watching ``name`` (not when called from its own watch: it is ending)."""
        task = self._tasks.pop(name, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self, name: str, candidate: LoadedBundle, gates: Release) -> None:
        await asyncio.sleep(gates.window_s or DEFAULT_WINDOW_S)
        while True:
            found = self._lookup(name)
            if found is None or found[1] is not candidate:
                return  # promoted, aborted or replaced meanwhile
            verdict = judge(gates, name, candidate.version, measure(candidate, found[0]))
            if verdict is not None:
                break
            await asyncio.sleep(RECHECK_S)
        self._tasks.pop(name, None)
        try:
            await self._on_verdict(verdict, candidate)
        except Exception:
            log.exception("acting on the release gates of %s failed", name)

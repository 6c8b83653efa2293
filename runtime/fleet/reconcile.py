"""The reconcile owner: one verified fleet document at a time, applied bundle by bundle.

Every source (MQTT, ``PUT /v1/desired``, the desired file) calls `Reconciler.offer`. A
document is verified against the persisted serial (``verify``: signature, role, scope,
expiry, replay) and against what serves (a lower version needs the document's downgrade
permission); a refused one changes nothing and is kept as ``refused`` for the report.
An accepted one is persisted first (`FleetStateFile`), then applied by the one worker task:

- per bundle, independently (`apply.py`): already serving → ``applied``; else pulled and
  installed; a failure leaves the previous version serving (``failed``; not retried for
  this document). An unreachable registry (`PullDeferred`) leaves the bundle ``pending``:
  the pass is retried with a doubling backoff until it converges or a newer document
  arrives.
- bundles the fleet installed (``owned``) and no longer wants are removed; the others are
  the operator's and only reported (``local``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Literal

import msgspec

from wasmgate._compat import UTC, Self
from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.errors import DocumentRefused, NotFound
from wasmgate.runtime.fleet.apply import BundleOutcome, Pull, apply_one, describe_error, outcome
from wasmgate.runtime.fleet.state import (
    FleetRecord,
    FleetStateFile,
    Plan,
    encode_envelope,
    peek_serial,
)
from wasmgate.runtime.ops.tasks import wake_or_timeout
from wasmgate.signing.errors import FleetDowngradeError, SigningError
from wasmgate.typed import replace

log = logging.getLogger("wasmgate.fleet")

State = Literal["pending", "applying", "applied", "failed"]
Settle = Callable[[], Awaitable[None]]
"""Until every process of the gateway serves what the registry serves (workers replaced)."""
Verify = Callable[[bytes, int | None], Plan]
"""(document bytes, last accepted serial) -> its plan; raises `SigningError` when refused."""


class Refusal(msgspec.Struct, frozen=True):
    serial: int | None
    error: str


class LastFailure(msgspec.Struct, frozen=True):
    """The last bundle a document failed to apply: kept after a newer document (a rollout's
    rollback) applied, so the gateway still reads as failed for it, with the whole reason,
    until a later document applies that bundle."""

    serial: int
    bundle: str
    version: int
    error: str
    at: str


class Backoff(msgspec.Struct, frozen=True):
    initial_s: float
    max_s: float


class Reconciler:
    """Owns the fleet state file and the apply task (``async with``)."""

    def __init__(
        self,
        registry: Registry,
        state_dir: Path,
        verify: Verify,
        pull: Pull,
        backoff: Backoff,
        *,
        settle: Settle | None = None,
    ) -> None:
        self._registry = registry
        self._settle = settle
        self._file = FleetStateFile(state_dir)
        self._verify = verify
        self._pull = pull
        self._backoff = backoff
        self.record: FleetRecord = self._file.load()
        self.state: State | None = None
        self.reason: str | None = None
        self.refused: Refusal | None = None
        self.last_failure: LastFailure | None = None
        self.bundles: dict[str, BundleOutcome] = {}
        self.on_change: list[Callable[[], None]] = []
        self.on_refusal: list[Callable[[Refusal], None]] = []
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._serial: int | None = None
        """The serial whose bundle outcomes ``bundles`` holds."""

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name="fleet-reconcile")
        if self.record.plan is not None:
            self._wake.set()  # resume what a restart (or SIGKILL) interrupted
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- documents in -------------------------------------------------------------------

    async def offer(self, data: bytes, source: str) -> bool:
        """Verify and accept ``data``; False when it is the document already accepted.

        Raises `DocumentRefused` (the reason is also kept for the report)."""
        async with self._lock:
            if data == self.record.envelope_bytes():
                return False
            try:
                plan = await asyncio.to_thread(self._verify, data, self.record.serial)
                self._check_downgrades(plan)
            except SigningError as e:
                self._refuse(data, source, e)
                raise DocumentRefused(describe_error(e)) from e
            record = replace(
                self.record, serial=plan.serial, plan=plan, envelope=encode_envelope(data)
            )
            await asyncio.to_thread(self._file.save, record)
            self.record = record
            log.info("fleet document %d accepted (%s)", plan.serial, source)
        # The report of the new serial lists the new document's bundles, not the previous
        # document's outcomes (a stale "applied" under the new serial, one message per
        # gateway per document for nothing). `_serial` stays: `_apply` starts afresh.
        self.bundles = {w.name: outcome(w, "applying") for w in plan.bundles}
        self._set("applying", None)  # at once: a reader never sees the old outcome as new
        self._wake.set()
        return True

    async def judge(self, data: bytes) -> int:
        """The serial ``data`` would stand at if offered now; raises `SigningError` where
        `offer` would refuse it. Nothing is recorded, so a source holding several documents
        weighs them on what verifies, never on what an unverified one claims.

        The accepted document itself is judged by its serial (it passed when it came; its
        own serial is no replay of itself, and its expiry no longer matters)."""
        record = self.record
        if record.serial is not None and data == record.envelope_bytes():
            return record.serial
        plan = await asyncio.to_thread(self._verify, data, record.serial)
        self._check_downgrades(plan)
        return plan.serial

    def refuse(self, data: bytes, source: str, e: SigningError) -> None:
        """Record a refusal found by `judge` (status, report, metric), as `offer` would."""
        self._refuse(data, source, e)

    def _check_downgrades(self, plan: Plan) -> None:
        """A version below the serving one needs the document's explicit permission."""
        slots = self._registry.table.slots()
        for want in plan.bundles:
            slot = slots.get(want.name)
            if slot is None or want.version >= slot.current.version:
                continue
            if plan.downgrades.get(want.name) != want.version:
                raise FleetDowngradeError(
                    want.name,
                    f"version {want.version} is below the serving {slot.current.version} and "
                    "the document grants no downgrade to it",
                )

    def _refuse(self, data: bytes, source: str, e: SigningError) -> None:
        self.refused = Refusal(peek_serial(data), describe_error(e))
        log.warning("fleet document refused (%s): %s", source, self.refused.error)
        for hook in self.on_refusal:
            hook(self.refused)
        self._changed()

    # -- apply --------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = self._backoff.initial_s
        while True:
            await self._wake.wait()
            self._wake.clear()
            plan = self.record.plan
            if plan is None:
                continue
            try:
                await self._apply(plan)
            except Exception as e:  # a bug or a full disk must not end the fleet for good
                log.exception("fleet: applying document %d failed", plan.serial)
                self._set("pending", f"internal error, retrying: {describe_error(e)}")
            if self.state != "pending":
                delay = self._backoff.initial_s
                continue
            await wake_or_timeout(self._wake, delay)  # a new document cuts the wait short
            self._wake.set()
            delay = min(delay * 2, self._backoff.max_s)

    async def _apply(self, plan: Plan) -> None:
        if self._serial != plan.serial:  # a new document: every bundle is looked at again
            self.bundles = {w.name: outcome(w, "applying") for w in plan.bundles}
            self._serial = plan.serial
        self._set("applying", None)
        for want in plan.bundles:
            if self.record.plan is not plan:
                return  # a newer document: the loop starts over with it
            if self.bundles[want.name].state in ("pending", "applying"):
                done = await apply_one(self._registry, self._pull, self._owned, plan, want)
                if self._settle is not None:
                    await self._settle()  # "applied" once every worker serves it
                self.bundles[want.name] = done
                self._changed()
        await self._remove_unwanted(plan)
        self._finish()

    async def _remove_unwanted(self, plan: Plan) -> None:
        wanted = {w.name for w in plan.bundles}
        for name in [n for n in self.record.owned if n not in wanted]:
            version = None
            with contextlib.suppress(NotFound):
                version = (await self._registry.remove(name)).version
                log.info("fleet: removed %s (no longer wanted)", name)
            await self._own(name, owned=False)
            self.bundles[name] = BundleOutcome(version or 0, None, "removed")
            self._changed()

    async def _owned(self, name: str) -> None:
        await self._own(name, owned=True)

    async def _own(self, name: str, *, owned: bool) -> None:
        async with self._lock:
            names = set(self.record.owned)
            if (name in names) == owned:
                return
            names = names | {name} if owned else names - {name}
            record = replace(self.record, owned=tuple(sorted(names)))
            await asyncio.to_thread(self._file.save, record)
            self.record = record

    def _finish(self) -> None:
        states = [self.bundles[n] for n in self.bundles if self.bundles[n].state != "removed"]
        pending = [b for b in states if b.state == "pending"]
        failed = [b for b in states if b.state == "failed"]
        self._remember_failure()
        if pending:
            self._set("pending", pending[0].error)
        elif failed:
            self._set("failed", failed[0].error)
        else:
            self._set("applied", None)

    def _remember_failure(self) -> None:
        """Keep this document's first failed bundle; forget the one kept once a later
        document applies that bundle at its version or above (a rollback to the previous
        version does not)."""
        serial = self._serial
        if serial is None:
            return
        for name, b in self.bundles.items():
            if b.state == "failed":
                self.last_failure = LastFailure(serial, name, b.version, b.error or "", _now())
                return
        kept = self.last_failure
        if kept is not None and kept.serial < serial:
            done = self.bundles.get(kept.bundle)
            if done is not None and done.state == "applied" and done.version >= kept.version:
                self.last_failure = None

    def _set(self, state: State, reason: str | None) -> None:
        self.state, self.reason = state, reason
        self._changed()

    def _changed(self) -> None:
        for hook in self.on_change:
            try:
                hook()
            except Exception:
                log.exception("fleet change hook failed")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

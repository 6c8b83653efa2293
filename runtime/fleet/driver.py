"""The rollout as it talks to the broker: per-gateway documents, waits, abort and rollback.

The rules live in `rollout.py` (pure); this module does the I/O around them (the waiting
for each wave's verdicts is `waves.py`'s):

1. Read the retained reports (``<prefix>/+/deployment``) and desired documents; the group's
   gateways are the reports that list the group. Each gateway's *previous* state is the
   document that applies to it now (its own, else the group's), which must carry a valid
   signature of one of the operator's keys: the CLI re-signs that bundle set on a rollback
   and must never launder a document someone else planted on the broker.
2. Wave by wave: publish ``<prefix>/<gw>/desired`` (target ``gateways: [gw]``) with the new
   bundle in place of the old one, then wait until every gateway of the wave reported that
   serial with a final state, refused it, or the wave timeout passed.
3. Abort: every gateway that received the new document gets a newer one with its previous
   bundle set and a downgrade permission for the rolled-back bundle; later waves are never
   touched. Success: the group document, then the per-gateway documents are cleared (the
   gateways fall back to the group document, which asks for the same bundles).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import nacl.signing

from wasmgate._compat import UTC
from wasmgate.runtime.fleet.opclient import OperatorClient
from wasmgate.runtime.fleet.rollout import (
    Outcome,
    Size,
    Wanted,
    below_previous,
    downgrades_for,
    next_serial,
    plan_waves,
    should_abort,
    with_bundle,
)
from wasmgate.runtime.fleet.status import Desired, FleetView, split_topics
from wasmgate.runtime.fleet.waves import Progress, Row, WaveWatch
from wasmgate.signing.envelope import FLEET_PAYLOAD_TYPE, count_valid, parse_envelope
from wasmgate.signing.fleetdoc import (
    MAX_SERIAL,
    FleetDoc,
    Target,
    sign_fleet,
)
from wasmgate.signing.keys import key_id_of
from wasmgate.typed import convert, plain

_COLLECT_S = 10.0


class RolloutRefused(Exception):
    """The rollout cannot start (no gateway, untrusted previous state); nothing was sent."""


@dataclass(frozen=True)
class RolloutPlan:
    """What the operator asked for."""

    group: str
    new: Wanted
    waves: Sequence[Size]
    abort_failed: Size
    min_done: int
    wave_timeout: float
    lifetime: timedelta = timedelta(days=30)
    allow_downgrade: bool = False
    """A rollback on purpose: every document of the rollout grants the signed downgrade to
    exactly ``new``'s version (without it, a lower version than a gateway's current
    document asks for is refused before anything is sent)."""

    def grants(self) -> list[tuple[str, int]]:
        """The downgrade permissions the rollout's own documents carry."""
        return [(self.new.name, self.new.version)] if self.allow_downgrade else []


@dataclass
class RolloutResult:
    rows: list[Row]
    aborted_at: int | None = None  # wave number (1-based) that tripped the abort
    serials: list[int] = field(default_factory=list)

    @property
    def applied_everywhere(self) -> bool:
        return self.aborted_at is None and all(r.state == "applied" for r in self.rows)


class Rollout:
    """One ``fleet rollout`` run over an open `OperatorClient`."""

    def __init__(
        self,
        client: OperatorClient,
        prefix: str,
        keys: list[nacl.signing.SigningKey],
        progress: Progress | None = None,
    ) -> None:
        self._client = client
        self._root = prefix.rstrip("/")
        self._keys = keys
        self._waves = WaveWatch(client, self._root, progress or (lambda _row: None))

    def run(self, plan: RolloutPlan, on_start: Callable[[int], object] = id) -> RolloutResult:
        """Roll ``plan`` out; ``on_start(gateway count)`` once the group is known."""
        view = self._read()
        members = [r.gateway for r in view.members(plan.group)]
        if not members:
            raise RolloutRefused(f"no gateway reports group {plan.group!r} under {self._root}/")
        # every previous state is checked before anything is sent: a refusal changes nothing
        previous = {r.gateway: self._trusted(view.desired_for(r)) for r in view.members(plan.group)}
        group_prev = self._trusted(view.group_docs.get(plan.group))
        _check_downgrade(previous, plan)
        waves = plan_waves(members, plan.waves)
        on_start(len(members))
        rows = {gw: Row(gw, i + 1) for i, wave in enumerate(waves) for gw in wave}
        result = RolloutResult(list(rows.values()))
        serial = self._serial(view)
        outcomes: dict[str, Outcome] = {}
        for number, wave in enumerate(waves, start=1):
            self._publish(
                wave, serial, plan, lambda gw: with_bundle(previous[gw], plan.new),
                lambda _gw: plan.grants(),
            )  # fmt: skip
            outcomes |= self._waves.wait(
                wave, serial, plan.new, plan.wave_timeout, rows, final=True
            )
            if should_abort(outcomes, plan.abort_failed, plan.min_done):
                result.aborted_at = number
                moved = [gw for w in waves[:number] for gw in w]
                result.serials = [serial, self._rollback(moved, previous, plan, rows)]
                return result
        result.serials = [serial, self._finish(members, group_prev, plan)]
        return result

    # -- reading ------------------------------------------------------------------------

    def _read(self) -> FleetView:
        # every group's document: a member of two groups runs the newer of the two
        filters = [f"{self._root}/+/deployment", f"{self._root}/+/desired"]
        filters.append(f"{self._root}/fleet/+/desired")
        return split_topics(self._root, self._client.collect(filters, _COLLECT_S))

    def _trusted(self, desired: Desired | None) -> list[Wanted]:
        """The bundle set of a retained document, once one of our keys' signatures checks."""
        if desired is None:
            return []
        env = parse_envelope(desired.raw)
        ours = {key_id_of(k.verify_key): k.verify_key for k in self._keys}
        if not count_valid(ours, FLEET_PAYLOAD_TYPE, env.payload_bytes(), env):
            signers = ", ".join(sorted({s.key_id[:16] for s in env.signatures})) or "no key"
            given = ", ".join(sorted(k[:16] for k in ours))
            raise RolloutRefused(
                f"the desired document serial {desired.doc.serial} now on the broker is not "
                f"signed by any --key given (given: {given}; it is signed by {signers}): a "
                "rollout signs fleet documents, so --key is a key of the fleet role in the "
                "gateways' trust file, the one that signed that document, not a bundle "
                "signer's key. The rollout would re-sign a bundle set it cannot vouch for "
                "(give the fleet key that signed it, or publish a fresh document first)"
            )
        return [Wanted(b.name, b.version, b.ref) for b in desired.doc.bundles]

    def _serial(self, view: FleetView) -> int:
        reports = list(view.reports.values())
        seen: list[int | None] = [r.serial for r in reports]
        seen += [r.refused.serial for r in reports if r.refused is not None]
        seen += [d.doc.serial for d in [*view.group_docs.values(), *view.gateway_docs.values()]]
        serial = next_serial(int(time.time() * 1000), seen)
        if serial > MAX_SERIAL:  # a report claimed the last serial there is: say so, send nothing
            raise RolloutRefused(
                f"a report or document claims serial {serial - 1}: no serial above"
            )
        return serial

    # -- writing ------------------------------------------------------------------------

    def _doc(
        self,
        serial: int,
        target: Target,
        bundles: Iterable[Wanted],
        lifetime: timedelta,
        downgrades: Iterable[tuple[str, int]],
    ) -> bytes:
        now = datetime.now(UTC).replace(microsecond=0)
        data = {
            "serial": serial,
            "issued": now,
            "expires": now + lifetime,
            "target": plain(target),
            "bundles": [{"name": w.name, "version": w.version, "ref": w.ref} for w in bundles],
            "downgrades": [{"name": n, "version": v} for n, v in downgrades],
        }
        # convert, not FleetDoc(...): msgspec checks patterns and bounds only there, and the
        # names and refs come from registry annotations and the broker. Sign nothing that
        # a gateway would refuse.
        return sign_fleet(convert(data, FleetDoc, whole="fleet document"), self._keys)

    def _publish(
        self,
        gateways: Iterable[str],
        serial: int,
        plan: RolloutPlan,
        bundles: Callable[[str], list[Wanted]],
        downgrades: Callable[[str], list[tuple[str, int]]] = lambda _: [],
    ) -> None:
        self._client.publish_many(
            (f"{self._root}/{gw}/desired", self._doc(
                serial, Target(gateways=[gw]), bundles(gw), plan.lifetime, downgrades(gw)
            ))
            for gw in gateways
        )  # fmt: skip

    def _rollback(
        self,
        moved: list[str],
        previous: dict[str, list[Wanted]],
        plan: RolloutPlan,
        rows: dict[str, Row],
    ) -> int:
        serial = self._serial(split_topics(self._root, self._client.snapshot()))
        self._publish(
            moved, serial, plan, lambda gw: previous[gw],
            lambda gw: downgrades_for(previous[gw], plan.new),
        )  # fmt: skip
        self._waves.wait(moved, serial, plan.new, plan.wave_timeout, rows, final=False)
        return serial

    def _finish(self, members: list[str], group_prev: list[Wanted], plan: RolloutPlan) -> int:
        serial = self._serial(split_topics(self._root, self._client.snapshot()))
        bundles = with_bundle(group_prev, plan.new)
        data = self._doc(serial, Target(group=plan.group), bundles, plan.lifetime, plan.grants())
        self._client.publish(f"{self._root}/fleet/{plan.group}/desired", data)
        self._client.publish_many((f"{self._root}/{gw}/desired", b"") for gw in members)
        return serial


def _check_downgrade(previous: dict[str, list[Wanted]], plan: RolloutPlan) -> None:
    """A rollout to a lower version is a rollback: refused unless the operator said so."""
    lower = below_previous(previous, plan.new)
    if lower and not plan.allow_downgrade:
        gw, version = next(iter(lower.items()))
        raise RolloutRefused(
            f"{plan.new.name} v{plan.new.version} is below v{version}, which {gw} is asked "
            f"to run now ({len(lower)} gateway(s)): to roll back, give --allow-downgrade"
        )

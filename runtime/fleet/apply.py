"""One bundle of an accepted fleet document, brought to the registry; its outcome.

Per bundle, independently of the others: already serving as asked → ``applied`` (a staged
candidate of the wanted version is promoted when the document no longer stages it, and one
of another version is aborted when the document wants the serving version alone); else
pull, then the registry's stage → selftest → commit path, staged at ``staged_percent`` when
given. A failure leaves the previous version serving (``failed``); an unreachable registry
(`PullDeferred`) leaves the bundle ``pending`` for the reconciler (`reconcile.py`) to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.errors import BundleRejected
from wasmgate.runtime.fleet.state import Plan, Want

log = logging.getLogger("wasmgate.fleet")

BundleState = Literal["applied", "pending", "failed", "removed", "local", "applying"]
Pull = Callable[[str], Awaitable[bytes | Path]]
"""ref -> the bundle; raises `PullDeferred` when the registry cannot be reached."""


class PullDeferred(Exception):
    """The bundle could not be fetched now (registry unreachable): try again later."""


@dataclass
class BundleOutcome:
    version: int
    digest: str | None
    state: BundleState
    error: str | None = None
    staged_percent: int | None = None
    downgraded_from: int | None = None
    """The version a signed downgrade replaced (the event is also logged by the store)."""


def describe_error(e: BaseException) -> str:
    """An error as reports show it: its type, then its message."""
    return f"{type(e).__name__}: {e}"


def outcome(want: Want, state: BundleState, error: str | None = None) -> BundleOutcome:
    """``want``'s outcome in ``state`` (its version, digest and staged share)."""
    return BundleOutcome(want.version, want.digest, state, error, want.staged_percent)


Own = Callable[[str], Awaitable[None]]
"""Record a name as the fleet's (installed by it, so removed when no longer wanted)."""


async def apply_one(
    registry: Registry, pull: Pull, own: Own, plan: Plan, want: Want
) -> BundleOutcome:
    """Bring ``want`` of ``plan`` to the registry: already serving, or pulled and installed."""
    if await satisfied(registry, want):
        return outcome(want, "applied")
    try:
        data = await pull(want.ref)
    except PullDeferred as e:
        return outcome(want, "pending", f"registry unreachable: {e}")
    except Exception as e:  # a refused artifact (digest, size), a bad ref, ...
        log.warning("fleet: pulling %s failed: %s", want.ref, e)
        return outcome(want, "failed", describe_error(e))
    slot = registry.table.slots().get(want.name)
    if slot is None:
        await own(want.name)  # before: a crash right after must not orphan it
    # Imported here: fleet documents' models load only in a daemon that is sent one.
    from wasmgate.signing.fleetdoc import Downgrade  # noqa: PLC0415

    try:
        await registry.install(
            data,
            source=f"fleet {plan.serial}",
            percent=want.percent,
            downgrades=[Downgrade(name=n, version=v) for n, v in plan.downgrades.items()],
        )
    except BundleRejected as e:
        return outcome(want, "failed", str(e))
    await own(want.name)
    done = outcome(want, "applied")
    if slot is not None and slot.current.version > want.version:
        done.downgraded_from = slot.current.version
    return done


async def satisfied(registry: Registry, want: Want) -> bool:
    """Whether ``want`` already serves as asked (promoting or aborting a candidate)."""
    slot = registry.table.slots().get(want.name)
    if slot is None:
        return False
    candidate = slot.candidate
    if candidate is not None and candidate.version == want.version:
        if want.percent == 100:
            await registry.promote(want.name, "fleet")
        return True
    if slot.current.version != want.version:
        return False
    if candidate is not None:  # the document wants the serving version alone
        await registry.abort(want.name, "fleet", "not in the fleet document")
    return True

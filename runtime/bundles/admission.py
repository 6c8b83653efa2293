"""Trust and expiry enforcement: which installed bundles and staged candidates may serve.

The store re-verifies what it holds against the current trust store and clock
(`BundleStore.recheck`); `Admission` turns its verdicts into actions at start (`admits`,
asked by the start-up loading), after a trust reload (`apply_trust`: a revoked key's
bundles unload) and when a serving bundle's ``expires`` passes (`enforce`, from the expiry
watch, `expiry.py`). An installed bundle that expired keeps serving with a warning or
stops, by the expiry policy (``trust.expiry``); a fresh install of an expired bundle is
always refused (by the store, when staging it).

It owns the policy and the bundles found expired (``Registry.expiry``, ``Registry.expired``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Literal, Protocol

from wasmgate.runtime.bundles.journal import Journal
from wasmgate.runtime.bundles.staged import Releases
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.signing.errors import ExpiredError, SigningError
from wasmgate.signing.trust import TrustStore

log = logging.getLogger("wasmgate.registry")

ExpiryPolicy = Literal["stop", "warn"]
"""What an expired bundle that was already installed does: stop serving, or keep serving
with a warning (a fresh install of an expired bundle is always refused)."""


class CheckedStore(Protocol):
    """The part of the bundle store (`registry.Store`) the trust checks use."""

    def recheck(self, staged: bool = False) -> Mapping[str, SigningError]: ...
    def use_trust(self, trust: TrustStore) -> None: ...


class Admission:
    """Applies the store's re-verification (and the expiry policy) to what serves."""

    def __init__(
        self,
        store: CheckedStore,
        table: ServingTable,
        lock: asyncio.Lock,
        journal: Journal,
        releases: Releases,
        *,
        policy: ExpiryPolicy = "warn",
    ) -> None:
        self._store = store
        self._table = table
        self._lock = lock
        self._journal = journal
        self._releases = releases
        self.policy = policy
        """The expiry policy (``trust.expiry``); SIGHUP may change it."""
        self.expired: dict[str, dict[str, str]] = {}
        """Installed bundles found expired: name -> {"action": "serving"|"stopped", "message"}."""

    async def apply_trust(self, trust: TrustStore) -> list[str]:
        """Use a reloaded trust store; unload bundles it no longer accepts (revocations)."""
        async with self._lock:
            await asyncio.to_thread(self._store.use_trust, trust)
            return await self._enforce("trust")

    async def enforce(self, source: str) -> list[str]:
        """Apply a fresh install's checks to what serves (e.g. when a bundle expires)."""
        async with self._lock:
            return await self._enforce(source)

    async def _enforce(self, source: str) -> list[str]:
        verdicts = await asyncio.to_thread(self._store.recheck)
        unloaded = []
        for name in list(self._table.slots()):
            if not self.admits(name, verdicts.get(name), source):
                slot = self._table.remove(name)
                unloaded.append(name)
                why = verdicts[name]
                msg = f"unloaded: the trust store no longer accepts it: {why}"
                if isinstance(why, ExpiredError):
                    msg = f"unloaded (trust.expiry = stop): {why}"
                version = slot.current.version
                self._journal.record(source, ok=False, name=name, version=version, message=msg)
        for name, why in (await asyncio.to_thread(self._store.recheck, staged=True)).items():
            held = self._table.slots().get(name)
            if held is not None and held.candidate is not None and self.refuses_candidate(why):
                await self._releases.drop_candidate(name, source, f"no longer accepted: {why}")
        self._journal.changed()
        return unloaded

    def refuses_candidate(self, why: SigningError) -> bool:
        """A candidate's refusal counts unless it only expired under ``trust.expiry = warn``."""
        return not (isinstance(why, ExpiredError) and self.policy == "warn")

    def admits(self, name: str, why: SigningError | None, source: str) -> bool:
        """Whether an installed bundle may (keep) serving, given the store's verdict."""
        if why is None:
            self.expired.pop(name, None)
            return True
        if isinstance(why, ExpiredError):
            action = "serving" if self.policy == "warn" else "stopped"
            if self.expired.get(name, {}).get("action") != action:
                log.warning("bundle expired (expiry = %s): %s", self.policy, why)
            self.expired[name] = {"action": action, "message": str(why)}
            if self.policy == "warn":
                return True
        if source == "start-up":
            self._journal.record(source, ok=False, name=name, message=f"not loaded: {why}")
        return False

    def next_expiry(self) -> float | None:
        """The earliest ``expires`` (POSIX time) among serving bundles not yet found expired."""
        times = [
            b.expires
            for name, slot in self._table.slots().items()
            if name not in self.expired
            for b in slot.versions()
        ]
        return min(times, default=None)

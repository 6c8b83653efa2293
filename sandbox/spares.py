"""Spare instances: the next request's fresh instance, made ready off the request path.

Invariants:
- A spare is an instance nobody has used: it is built (store, limits, instantiation,
  ``_initialize``) on the engine's background thread and handed to exactly one request,
  which takes it out of the pool (``take``); after that request it is closed, never pooled
  again. Isolation is that of ``fresh`` mode: no request sees what another left behind.
- A used instance is closed by the next refill job, which runs when a request took the
  last ready spare (or ``cap()`` used ones wait, or the caller runs the job itself): one
  background wake-up per ``cap()`` requests instead of one each. Until then it stays
  open in a list no request reads from; ``close()`` closes those too.
- A spare is only handed to a request whose limits it was built under (`limits_key`:
  memory, table elements, fuel); any other request gets a new instance on its own path and
  the mismatched spare is closed. The deadline is re-armed by the request that takes it.
- A spare whose instantiation failed (trap, deadline, limit) or that made any host call
  while starting (its start code depended on a request: see ``Adapter``) is closed and turns
  spares off for this pool for good; its requests then instantiate on their own path, as
  before, so a bad ``_initialize`` costs background work at most once.
- At most ``cap()`` spares exist or are being built. ``close()`` closes every ready spare;
  one still being built is closed when its build ends: no store outlives its pool's owner.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasmgate.sandbox.background import Background
from wasmgate.sandbox.instance import Instance, LimitsKey

if TYPE_CHECKING:
    from wasmgate.sandbox.limits import GuestLimits

__all__ = ["Spares", "Unbound"]

Make = Callable[["GuestLimits"], "Instance | None"]
Later = Callable[[Callable[[], None]], object]
"""Runs a job later on some thread (the engine's background thread, or the caller's
event loop for a run made on the loop: see ``Adapter.run``)."""


class Unbound:
    """The thread's "request" while a spare starts: any use means the start code made a host
    call (which would have seen the request in fresh mode), so the spare is thrown away."""

    def __init__(self) -> None:
        """Untouched so far."""
        self.touched = False

    def __getattr__(self, name: str) -> Any:
        self.touched = True
        # The host callbacks turn this into an errno (their catch-all, see rawcall).
        raise LookupError(f"no request while a spare instance starts (.{name})")


class Spares:
    """The spare instances of one adapter (see the module invariants)."""

    def __init__(self, make: Make, background: Background, cap: Callable[[], int]) -> None:
        """``make(limits)`` builds one spare on the background thread (None: it failed)."""
        self._make = make
        self._background = background
        self._cap = cap
        self._lock = threading.Lock()
        self._ready: deque[Instance] = deque()
        self._used: list[Instance] = []  # closed by the next refill job (see recycle)
        self._building = 0
        self._closed = False
        self.disabled = False
        """True once a spare failed to start: no more spares for this adapter."""
        self.taken = 0
        """Spares handed to requests so far (observability, tests)."""

    @property
    def ready(self) -> int:
        """Spares ready for a request now."""
        return len(self._ready)

    @property
    def waiting(self) -> int:
        """Used instances waiting for the next refill job to close them."""
        return len(self._used)

    def take(self, key: LimitsKey) -> Instance | None:
        """A never-used instance built under ``key``, or None (then instantiate on the path)."""
        with self._lock:
            if not self._ready:
                return None
            inst = self._ready.popleft()
            self.taken += inst.key == key
        if inst.key != key:
            self.bury(inst)
            return None
        return inst

    def recycle(self, used: Instance, lim: GuestLimits, later: Later | None = None) -> None:
        """After a request: close ``used`` and top the spares up to ``cap()`` under ``lim``,
        in one job on ``later``'s thread, or else on the background thread. Waking that
        thread costs the request's thread ~5-8 µs on a VM (an IPI to an idle vCPU), so
        while a spare is still ready ``used`` waits, open, with at most ``cap() - 1``
        others; the request that takes the last spare wakes the thread once for all."""
        with self._lock:
            self._used.append(used)
            cap = self._cap()
            if later is None and self._ready and len(self._used) < cap:
                return  # the next request still finds a spare: refill with a later wake
            done, self._used = self._used, []
            full = self._closed or self.disabled
            build = 0 if full else max(0, cap - self._building - len(self._ready))
            self._building += build

        def job() -> None:
            for inst in done:
                inst.close()
            for left in range(build, 0, -1):
                if self.disabled:  # one failed: the rest would fail the same way
                    with self._lock:
                        self._building -= left
                    return
                self._build(lim)

        if later is not None:
            later(job)
        elif not self._background.submit(job):
            for inst in done:
                inst.close()
            with self._lock:
                self._building -= build

    def _build(self, lim: GuestLimits) -> None:
        inst: Instance | None = None
        try:
            inst = self._make(lim)
        finally:
            with self._lock:
                self._building -= 1
                if inst is None:
                    self.disabled = True
                elif not self._closed:
                    self._ready.append(inst)
                    inst = None
            if inst is not None:
                inst.close()  # built while the pool was closing

    def bury(self, inst: Instance) -> None:
        """Close a used (or unusable) instance off the request path; here if no thread runs."""
        if not self._background.submit(inst.close):
            inst.close()

    def close(self) -> None:
        """Close every spare (idempotent); later refills do nothing."""
        with self._lock:
            self._closed = True
            spares = [*self._ready, *self._used]
            self._ready.clear()
            self._used.clear()
        for inst in spares:
            inst.close()

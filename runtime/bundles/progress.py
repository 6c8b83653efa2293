"""How far the start-up loading has come: for ``/v1/status`` and the status page.

The daemon listens before its bundles are loaded (`wasmgate.runtime.compose.daemon`), so an
operator who opens the status page during a long start sees the count and what is loading
now instead of a refused connection. `StartUp` is the only writer; the event loop's
thread is the only one (no lock needed).
"""

from __future__ import annotations

import time
from typing import Literal

__all__ = ["LoadProgress"]

State = Literal["waiting", "loading", "done"]


class LoadProgress:
    """Bundles loaded of the total, the ones loading now, and the time so far."""

    def __init__(self) -> None:
        self.state: State = "waiting"
        self.total = 0
        self.loaded = 0
        self.loading: list[str] = []
        self._began = time.monotonic()
        self._ended: float | None = None

    def begin(self, total: int) -> None:
        """The start-up knows how many bundles it will load."""
        self.state, self.total, self._began = "loading", total, time.monotonic()

    def started(self, what: str) -> None:
        self.loading.append(what)

    def finished(self, what: str) -> None:
        """One bundle is done, whether it serves now or was refused (the journal says which)."""
        if what in self.loading:
            self.loading.remove(what)
        self.loaded += 1

    def end(self) -> None:
        self.state, self._ended, self.loading = "done", time.monotonic(), []

    def status(self) -> dict[str, object]:
        """``{"state", "loaded", "total", "loading": [...], "elapsed_s"}``."""
        end = self._ended if self._ended is not None else time.monotonic()
        return {
            "state": self.state,
            "loaded": self.loaded,
            "total": self.total,
            "loading": list(self.loading),
            "elapsed_s": round(end - self._began, 1),
        }

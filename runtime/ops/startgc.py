"""The cyclic garbage collector paused while ``wasmgate serve`` starts, until it listens.

A start imports some 800 modules and builds ~60 pydantic models: with the collector on, it
ran ~200 collections during the imports alone, each walking every object made so far, for
objects that nearly all live as long as the process. Paused, those walks become one full
collection when the daemon listens (~130k objects, ~100 ms on the loaded 2-core VM), done
just before READY=1 so that its time counts in the start, not in the first requests.
Measured there, alternating with the collector on (3-bundle bench daemon, 10 warm starts
each): spawn to the first log line 1.28 -> 1.11 s, READY 1.58 -> 1.48 s (medians); idle RSS
+0.4 to +1.1 MB over several runs (objects freed late, into pools live objects share). A
threshold of 20 000 instead of a pause gained neither. Reference counting still frees
everything that is not in a cycle meanwhile.

Not `gc.freeze()`: objects frozen at start are never examined again, and a bundle loaded at
start can end up in a cycle when it is swapped out; a frozen cycle holding an ONNX Runtime
session would keep its memory for the life of the process.
"""

from __future__ import annotations

import gc
from types import TracebackType
from typing import Self


class StartupGc:
    """Automatic collection off from `pause` until `resume` (which collects once).

    As a context manager: leaving always resumes, so a failed start does not leave the
    collector off. A collector already off (an embedding program's choice) is left off.
    """

    def __init__(self, *, paused: bool = False) -> None:
        self._paused = False
        if paused:
            self.pause()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        if gc.isenabled():
            gc.disable()
            self._paused = True

    def resume(self) -> None:
        """Collect what piled up and switch the collector back on (idempotent)."""
        if not self._paused:
            return
        self._paused = False
        gc.collect()
        gc.enable()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.resume()

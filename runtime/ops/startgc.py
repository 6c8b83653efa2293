"""The cyclic garbage collector across the daemon's start.

A start imports the libraries and loads the bundles: tens of thousands of container
objects that live as long as the process, and next to no cyclic garbage. The collector
still walks them, young and then old, several times before READY; one full pass over them
takes ~30-60 ms on a 2-vCPU VM, and a full pass while serving stalls the event loop as long.

So `wasmgate serve` runs its start with the collector off (`pause`, before the imports).
At READY, `serving` moves everything then alive into the permanent generation
(``gc.freeze``) and turns the collector back on: it never walks those objects again,
and a full pass costs what the objects made since then cost. The price is the little
cyclic garbage the start made, kept (under 1 MB, measured).

Frozen objects are still freed by reference counting; only a cycle among them would stay.
A bundle loaded at start and unloaded later may hold such cycles, so an unload calls
`thaw`: the frozen objects go back to the collector's oldest generation, and its next
full pass frees them (and walks the rest once more).

The state is the interpreter's own (``gc.isenabled``, ``gc.get_freeze_count``): nothing
else is kept here.
"""

from __future__ import annotations

import gc

__all__ = ["pause", "resume", "serving", "thaw"]


def pause() -> bool:
    """Turn the collector off for a start; True if it was on (`resume` turns it back on)."""
    if not gc.isenabled():
        return False
    gc.disable()
    return True


def serving() -> None:
    """READY: keep what the start made out of every later pass, and collect again.

    Does nothing when the collector is on (`pause` was not called: a test's daemon)."""
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()


def resume() -> None:
    """The collector on again, without freezing (a start that ended before READY)."""
    gc.enable()


def thaw() -> None:
    """Hand the objects frozen at READY back to the collector (after a bundle unload)."""
    if gc.get_freeze_count():
        gc.unfreeze()

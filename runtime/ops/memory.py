"""Give the C heap's free pages back to the kernel after bursts of large, short-lived buffers.

Loading a bundle reads each model file into memory more than once (the verified blob, the
cached optimized graph, the copy ORT parses), in worker threads. glibc keeps what those
threads freed in their malloc arenas: measured on the 3-bundle bench daemon, ~20 MB of
idle RSS that nothing used any more. ``malloc_trim(0)`` walks every arena and returns the
free pages (``madvise``); live allocations are not moved, so it is safe at any moment and
takes a few milliseconds. Called once the start-up bundles are loaded and after every
change of what serves (installs, swaps and unloads free the same kind of buffers).
"""

from __future__ import annotations

import ctypes


def trim_heap() -> None:
    """Return the C heap's free pages to the kernel (nothing to do where there is no glibc)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own libc (dlopen caches it)
    except (AttributeError, OSError):  # musl, macOS: no malloc_trim
        return
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)

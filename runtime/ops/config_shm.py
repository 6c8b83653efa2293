"""The ``[shared_memory]`` section: the KServe/Triton system shared-memory extension.

Off by default. A region is memory on this machine, so only local (loopback) clients may
register, list, unregister or use one; ``token`` narrows that to the clients given it.
The caps bound what registered regions may map (docs/shared-memory.md).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from wasmgate.typed import Document

MIB = 1024 * 1024


class SharedMemorySettings(Document):
    enabled: bool = False
    """Serve the system shared-memory extension (``/v2/systemsharedmemory/...`` and the gRPC
    ``SystemSharedMemory*`` RPCs, and inputs and outputs in registered regions). Off (the
    default): those calls answer 403, as Triton does without ``--allow-client-shm``."""
    token: str | None = None
    """Bearer token every shared-memory call must carry (HTTP ``Authorization: Bearer``,
    gRPC metadata ``authorization``), inference requests naming a region included. None:
    any loopback client may use the extension; remote clients never may."""
    max_regions: Annotated[int, Meta(ge=1, le=1024)] = 16
    """Regions registered at once at most; one more is refused (400). Each keeps a file
    descriptor open, hence the bound of 1024 (the unit's LimitNOFILE is 4096)."""
    max_region_bytes: Annotated[int, Meta(gt=0)] = 64 * MIB
    """Largest ``byte_size`` of one region."""
    max_total_bytes: Annotated[int, Meta(gt=0)] = 256 * MIB
    """Sum of the ``byte_size`` of every registered region at most."""

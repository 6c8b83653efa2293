"""Who is calling, as the shared-memory checks need it: the peer's IP and its token.

Kept apart from `servicer` and `shm` so that both use it without importing each other.
"""

from __future__ import annotations

from typing import Any

from wasmgate.runtime.shm.attach import Attachment
from wasmgate.runtime.shm.registry import Regions


def peer_address(context: Any) -> str | None:
    """The IP address of ``context.peer()`` (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    peer = str(context.peer() or "")
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return None  # unix sockets and the like: not a loopback IP, refused


def authorization(context: Any) -> str | None:
    """Metadata ``authorization`` (``Bearer <token>``), if sent."""
    found = dict(context.invocation_metadata() or ())
    value = found.get("authorization")
    return value if isinstance(value, str) else None


def attachment(regions: Regions | None, context: Any) -> Attachment:
    """A ModelInfer's use of shared memory (nothing is checked until a tensor names one)."""
    return Attachment(regions, peer_address(context), authorization(context))

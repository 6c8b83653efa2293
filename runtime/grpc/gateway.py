"""The gateway behind a data-plane worker's gRPC listener (``[workers] count`` > 1).

A worker serves inference itself, but the RPCs that change every worker's memory — the
repository's load and unload, system shared-memory register and unregister — are the
whole gateway's business: the worker relays each to its supervisor as the HTTP call of the
same meaning (the supervisor applies it, checks the token and the peer as for HTTP, then
sends it to every worker and replays it to each new one), and answers the RPC with what the
supervisor answered, from the one error table. `Gateway` is that relay (the worker's
`wasmgate.runtime.http.forward.Forwarder`; gRPC does not import HTTP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

import msgspec

from wasmgate.runtime.grpc.peer import authorization, peer_address
from wasmgate.runtime.protocol.error_table import error_of_answer

__all__ = ["Gateway", "region_path", "relay", "repository_path"]


class Gateway(Protocol):
    async def apply(
        self, path: str, body: bytes, *, authorization: str | None, peer: str | None
    ) -> tuple[int, bytes]:
        """``POST path`` with ``body`` to the supervisor and every worker; its answer."""
        ...


def repository_path(name: str, action: str) -> str:
    return f"/v2/repository/models/{quote(name, safe='')}/{action}"


def region_path(name: str | None, action: str) -> str:
    base = "/v2/systemsharedmemory"
    return f"{base}/{action}" if not name else f"{base}/region/{quote(name, safe='')}/{action}"


async def relay(gateway: Gateway, path: str, doc: Mapping[str, Any], context: Any) -> None:
    """Apply the call through ``gateway`` as this RPC's caller (token, address); raise the
    error the supervisor answered with."""
    status, body = await gateway.apply(
        path,
        msgspec.json.encode(doc),
        authorization=authorization(context),
        peer=peer_address(context),
    )
    if status >= 300:
        raise error_of_answer(status, body)

"""The model repository extension (Triton's), for HTTP and gRPC alike: index, load, unload.

Over a gateway's bundles, not a model folder: the index lists every model and adapter
name the installed bundles serve (each serving or staged version) with Triton's states,
``READY`` or ``UNAVAILABLE`` and a reason. Unload stops serving a name: its bundle keeps
its place (and its names), requests already running finish, new ones are refused with
Triton's ``… has no available versions``; load serves it again. Neither changes what is
installed or loaded in memory, and both are forgotten at a restart (every installed name is
served again): the signed bundles, not this API, decide what a gateway holds.

Both need the management token (``http.management_token``) as ``Authorization: Bearer …``
(a gRPC metadata entry ``authorization``); without a configured token they are disabled
(Forbidden), with a wrong one refused (Unauthorized), before anything is looked at.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BadRequest, Forbidden, Unauthorized

log = logging.getLogger("wasmgate.manage")

State = Literal["READY", "UNAVAILABLE"]


class IndexEntry(msgspec.Struct, frozen=True):
    """One row of the index, in Triton's shape."""

    name: str
    version: str
    state: State
    reason: str = ""


def check_bearer(token: str | None, authorization: str | None, remote: str | None) -> None:
    """The management token check of every transport (compared in constant time)."""
    if not token:
        raise Forbidden("management API disabled: set http.management_token to enable it")
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.encode()
    ):
        log.warning("management call refused", extra={"remote": remote})
        raise Unauthorized("missing or wrong bearer token")


_UNLOAD_PARAMETERS = frozenset({"unload_dependents"})
"""What tritonclient sends with every unload; nothing depends on a model here."""


class Repository:
    """The extension over one serving table; ``token()`` is the management token now
    (read per call, so a reload applies at once)."""

    def __init__(self, table: ServingTable, token: Callable[[], str | None]) -> None:
        self._table = table
        self._token = token

    def authorize(self, authorization: str | None, remote: str | None = None) -> None:
        check_bearer(self._token(), authorization, remote)

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        entries = [e for info in self._table.model_infos() for e in self._entries(info.name)]
        return [e for e in entries if e.state == "READY"] if ready_only else entries

    def _entries(self, name: str) -> list[IndexEntry]:
        info = self._table.model_info(name)
        slot = self._table.slot(info.bundle)
        found = []
        for bundle in slot.versions():
            version = self._table.model_info(name, str(bundle.version))
            staged = "" if bundle is slot.current else f"staged for {slot.percent} % of requests"
            if version.ready:
                found.append(IndexEntry(name, str(bundle.version), "READY", staged))
            else:
                found.append(IndexEntry(name, str(bundle.version), "UNAVAILABLE",
                                        self._reason(name, version.kind)))  # fmt: skip
        return found

    def _reason(self, name: str, kind: str) -> str:
        if self._table.is_unloaded(name):
            return "unloaded through the model repository API"
        if kind == "adapter":
            return "a model the adapter needs is not loaded on this device"
        return "not loaded on this device (see GET /v1/status)"

    def load(self, name: str, parameters: Mapping[str, Any]) -> None:
        if parameters:
            raise BadRequest(
                f"load parameters {sorted(parameters)} are not supported: a model's files and "
                "configuration come from its signed bundle (PUT /v1/bundles)"
            )
        self._table.set_loaded(name, loaded=True)
        log.info("model repository: %s loaded", name)

    def unload(self, name: str, parameters: Mapping[str, Any]) -> None:
        unknown = sorted(set(parameters) - _UNLOAD_PARAMETERS)
        if unknown:
            raise BadRequest(f"unload parameters {unknown} are not supported")
        self._table.set_loaded(name, loaded=False)
        log.info("model repository: %s unloaded (requests running finish)", name)

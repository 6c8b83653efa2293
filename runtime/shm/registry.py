"""The daemon's registry of system shared-memory regions, and who may use it.

Regions are named per daemon, as in Triton: the KServe protocol has no client identity, and
Triton's clients register on one connection and infer on others (tritonclient's pools,
perf_analyzer's workers), so any caller allowed at all may use any registered region by
name. Who is allowed is the trust boundary (`Regions.allow`): the extension must be on
(``shared_memory.enabled``), the caller must be a loopback peer (a region is memory on this
machine; a remote caller could otherwise make the daemon open and overwrite local objects),
and it must carry ``shared_memory.token`` when one is set.

The composition root owns one `Regions` (`wasmgate.runtime.compose.app`) and closes it at shutdown:
every region is unmapped, none survives a restart.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
import threading

from wasmgate.runtime.errors import BadRequest, Forbidden, NotFound, Unauthorized
from wasmgate.runtime.ops.config_shm import SharedMemorySettings
from wasmgate.runtime.shm.region import Region

log = logging.getLogger("wasmgate.shm")
_REGION_NAME = re.compile(r"[A-Za-z0-9_.:@+-]{1,256}\Z")


def is_loopback(peer: str | None) -> bool:
    """Whether ``peer`` (an IP address, bracketed or not) is a loopback address."""
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


class Regions:
    """Registered regions by name, within the caps of ``[shared_memory]``."""

    def __init__(self, settings: SharedMemorySettings) -> None:
        self.settings = settings
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def allow(self, peer: str | None, authorization: str | None) -> None:
        """Refuse a caller that may not use shared memory (Forbidden / Unauthorized)."""
        if not self.settings.enabled:
            raise Forbidden("system shared memory is off: set shared_memory.enabled = true")
        if not is_loopback(peer):
            raise Forbidden(
                f"system shared memory is for local clients only; {peer or 'this peer'} "
                "is not a loopback address"
            )
        token = self.settings.token
        if token:
            scheme, _, given = (authorization or "").partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode(), token.encode()
            )
            if not ok:
                raise Unauthorized("shared memory: missing or wrong bearer token")

    def register(self, name: str, key: object, offset: object, byte_size: object) -> None:
        """Open and map ``key`` as region ``name`` (BadRequest naming what is wrong)."""
        if not _REGION_NAME.match(name):
            raise BadRequest(
                f"shared memory region name {str(name)[:80]!r}: letters, digits and "
                "'_.:@+-', 1 to 256 of them"
            )
        if not isinstance(key, str):
            raise BadRequest("shared memory register: 'key' must be a string")
        offset_n = _count(offset, "offset")
        size = _count(byte_size, "byte_size")
        caps = self.settings
        if size > caps.max_region_bytes:
            raise BadRequest(
                f"shared memory region {name!r}: byte_size {size} is over the cap of "
                f"{caps.max_region_bytes} (shared_memory.max_region_bytes)"
            )
        with self._lock:
            self._room_for(name, size)
            region = Region(name, key, offset_n, size)
            self._regions[name] = region
        log.info(
            "shared memory region registered",
            extra={"region": name, "key": key, "offset": offset_n, "byte_size": size},
        )

    def _room_for(self, name: str, size: int) -> None:
        caps = self.settings
        if name in self._regions:
            # Regions outlive their client (a crashed run leaves them): say how to clear one.
            raise BadRequest(
                f"shared memory region {name!r} is already registered (regions stay until "
                f"unregistered or the daemon restarts, also after a client crashed): "
                f"unregister it first, e.g. unregister_system_shared_memory({name!r})"
            )
        if len(self._regions) >= caps.max_regions:
            raise BadRequest(
                f"shared memory: {len(self._regions)} regions registered, the cap "
                f"(shared_memory.max_regions); unregister one first"
            )
        total = sum(r.byte_size for r in self._regions.values()) + size
        if total > caps.max_total_bytes:
            raise BadRequest(
                f"shared memory region {name!r}: {total} bytes registered in all would be "
                f"over the cap of {caps.max_total_bytes} (shared_memory.max_total_bytes)"
            )

    def unregister(self, name: str | None = None) -> int:
        """Forget region ``name`` (None: all of them); an unknown name is no error (as
        Triton's). Returns how many were forgotten."""
        with self._lock:
            if name is None:
                gone = list(self._regions.values())
                self._regions.clear()
            else:
                found = self._regions.pop(name, None)
                gone = [] if found is None else [found]
        for region in gone:
            region.close()
            log.info("shared memory region unregistered", extra={"region": region.name})
        return len(gone)

    def status(self, name: str | None = None) -> list[dict[str, object]]:
        with self._lock:
            if name is None:
                return [r.status() for r in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise NotFound(f"no shared memory region named {name!r}")
        return [region.status()]

    def summary(self) -> dict[str, object]:
        """The ``shared_memory`` section of ``/v1/status``: counts against their caps."""
        with self._lock:
            count, used = len(self._regions), sum(r.byte_size for r in self._regions.values())
        caps = self.settings
        return {"regions": count, "max_regions": caps.max_regions, "bytes": used,
                "max_total_bytes": caps.max_total_bytes}  # fmt: skip

    def leased(self, name: str) -> Region:
        """Region ``name``, leased to the caller (who calls ``release``)."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise BadRequest(f"no shared memory region named {name[:80]!r} is registered")
            region.lease()
        return region

    def close(self) -> None:
        """Unregister every region (the daemon stops)."""
        count = self.unregister()
        if count:
            log.info("shared memory regions unregistered at shutdown", extra={"count": count})


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"shared memory register: {what!r} must be a non-negative integer")
    return value

"""In-process fleet helpers: a stand-in verifier and "registry" for the reconciler tests.

The signature check and the registry transport are not what those tests are about: the
verifier parses a plan and applies the replay and expiry rules, the puller hands out files
the kit built (or raises `PullDeferred` while "the registry is down"). The daemon tests run
the real ones.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import Stack
from wasmgate.runtime.fleet.apply import PullDeferred
from wasmgate.runtime.fleet.reconcile import Backoff, Reconciler
from wasmgate.runtime.fleet.state import Plan
from wasmgate.signing.envelope import parse_envelope
from wasmgate.signing.errors import FleetExpiredError, FleetReplayError
from wasmgate.typed import convert

FAST = Backoff(initial_s=0.05, max_s=0.2)
DIGEST = "sha256:" + "ab" * 32


def want(name: str, version: int, percent: int | None = None) -> dict[str, Any]:
    ref = f"127.0.0.1:5000/{name}@{DIGEST}"
    return {"name": name, "version": version, "ref": ref, "staged_percent": percent}


def document(serial: int, *wants: dict[str, Any], **extra: Any) -> bytes:
    """A plan in an (unsigned) envelope, so its serial can be peeked like a real one's."""
    payload = json.dumps({"serial": serial, "bundles": list(wants), **extra}).encode()
    envelope = {"payload_type": "test", "payload": base64.b64encode(payload).decode()}
    return json.dumps({**envelope, "signatures": []}).encode()


def verify(data: bytes, last_serial: int | None) -> Plan:
    """A stand-in for `verify_fleet`: the plan as given, with the replay and expiry rules."""
    obj = json.loads(parse_envelope(data).payload_bytes())
    if obj.pop("expired", False):
        raise FleetExpiredError("fleet document: expired")
    plan = convert(obj, Plan, strict=False)
    if last_serial is not None and plan.serial <= last_serial:
        raise FleetReplayError(f"serial {plan.serial} not above {last_serial}")
    return plan


@dataclass
class Shelf:
    """The "registry": ref -> bundle file; ``down`` makes every pull fail as unreachable."""

    kit: BundleKit
    files: dict[str, Path] = field(default_factory=dict)
    down: bool = False
    pulls: list[str] = field(default_factory=list)

    def put(self, name: str, version: int, **kw: Any) -> dict[str, Any]:
        w = want(name, version)
        w["ref"] = f"127.0.0.1:5000/{name}@sha256:{version:064x}"
        self.files[w["ref"]] = self.kit.build(name, version, **kw)
        return w

    async def pull(self, ref: str) -> Path:
        self.pulls.append(ref)
        if self.down:
            raise PullDeferred("connection refused")
        return self.files[ref]


@asynccontextmanager
async def reconciler(st: Stack, shelf: Shelf) -> AsyncIterator[Reconciler]:
    async with Reconciler(st.registry, st.state_dir, verify, shelf.pull, FAST) as rec:
        yield rec


async def settled(
    rec: Reconciler, until: Callable[[Reconciler], bool], timeout: float = 60
) -> None:
    async with asyncio.timeout(timeout):
        while not until(rec):
            await asyncio.sleep(0.02)


def done(rec: Reconciler) -> bool:
    return rec.state in ("applied", "failed")


def serving(st: Stack) -> dict[str, int]:
    return {n: s.current.version for n, s in st.registry.table.slots().items()}

"""The daemon's core, in process and real: bundle store, sandbox engine, ORT, registry, service.

Used by the service and registry tests; the HTTP, systemd and hot-swap tests run the
daemon itself (``daemon_factory``) or the composed app instead.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.runtime.bundlekit import BundleKit
from wasmgate.device_profiles import DeviceProfile, load_profile
from wasmgate.runtime.backends.watchdog import Watchdog
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.bundles.kv import StateDb
from wasmgate.runtime.bundles.loader import LoaderDeps
from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.cloud.policy import CloudClient
from wasmgate.runtime.compose.app import ceilings
from wasmgate.runtime.ops.config import LimitSettings, Settings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.serving.inline import InlinePolicy
from wasmgate.runtime.serving.scheduler import FairPool
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.sandbox import SandboxEngine
from wasmgate.signing.store import BundleStore


def host_profile_name() -> str:
    machine = platform.machine().lower()
    return "generic-arm64" if machine in ("aarch64", "arm64") else "generic-x86_64"


def host_profile() -> DeviceProfile:
    return load_profile(host_profile_name())


@dataclass
class Stack:
    kit: BundleKit
    store: BundleStore
    registry: Registry
    service: InferenceService
    metrics: Metrics
    state_dir: Path

    async def install(self, path: Path, **kw: Any) -> None:
        await self.registry.install(path, source="test", **kw)


@contextlib.asynccontextmanager
async def open_stack(
    tmp: Path,
    kit: BundleKit,
    *,
    limits: LimitSettings | None = None,
    cloud: CloudClient | None = None,
    start: tuple[Path, ...] = (),
    state_dir: Path | None = None,
    watchdog: bool = True,
    adapter_state: bool = False,
    inline_adapters: InlinePolicy | None = None,
    clock: Callable[[], datetime] | None = None,
) -> AsyncIterator[Stack]:
    """A started registry + service over a fresh (or given) store; everything closed after.

    ``watchdog=False`` leaves model runs unstoppable (as LiteRT's are); ``adapter_state``
    gives ``[state]`` grants a real (in-memory) state database, as the daemon does;
    ``inline_adapters`` replaces the service's inline policy for adapters; ``clock`` is the
    store's (signature times, expiry), so a test can start after a bundle expired."""
    lim = limits or LimitSettings()
    settings = Settings(limits=lim)
    state = state_dir or tmp / "state"
    store = BundleStore(state, kit.trust, max_bundle_bytes=lim.max_bundle_bytes, clock=clock)
    metrics = Metrics()
    # The pool closes first: a running guest needs the engine's epoch ticker to stop.
    with (
        SandboxEngine(tmp / "cache" / "modules", ceilings(settings)) as engine,
        Watchdog(on_fire=metrics.observe_cancelled) as dog,
        BatchDispatcher(2) as dispatcher,
        FairPool(8) as pool,
        StateDb(None) as kv,
    ):
        deps = LoaderDeps(
            engine,
            host_profile(),
            lim,
            cache_dir=tmp / "cache" / "models",
            dispatcher=dispatcher,
            watchdog=dog if watchdog else None,
            state=kv if adapter_state else None,
        )
        registry = Registry(store, deps)
        service = InferenceService(
            registry.table, pool, lim, cloud=cloud, metrics=metrics, inline_adapters=inline_adapters
        )
        await registry.start(start)
        try:
            yield Stack(kit, store, registry, service, metrics, state)
        finally:
            service.start_draining()
            await service.drained(5)
            await registry.close(5)
            deps.close()

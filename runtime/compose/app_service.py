"""The bundle side of the composition root (`wasmgate.runtime.compose.app`): the trust store, the
bundle store, the registry and the service built over them (empty: stage two fills them,
`wasmgate.runtime.compose.app_open`), and what changes when the trust file does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.bundles.watcher import DirWatcher
from wasmgate.runtime.compose.app_keys import (
    BUNDLE_STORE,
    CLOUD,
    DEPS,
    LOG_LIMITS,
    POOL,
    SERVICE_IMPL,
    SLOTS,
    STORE,
    WATCHER,
)
from wasmgate.runtime.compose.app_open import deferrer
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.field.events import StoredEvents
from wasmgate.runtime.field.samples import StoredSamples
from wasmgate.runtime.http import status
from wasmgate.runtime.http.keys import LIVE, METRICS, REGISTRY, SERVICE, SETTINGS
from wasmgate.runtime.http.variables import VARIABLES
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.serving.service import InferenceService
from wasmgate.signing.errors import SigningError
from wasmgate.signing.store import BundleStore
from wasmgate.signing.trust import TrustStore

__all__ = ["apply_trust_file", "load_trust", "open_store", "service_ctx", "trust_status"]

log = logging.getLogger("wasmgate.app")


def load_trust(settings: Settings) -> TrustStore:
    """The trust store, checked against the pinned copy in the state dir (TUF rotation rule).

    A root-signed trust file is pinned on first sight; a later file must be its successor,
    signed by the previous roots, or it is refused (SigningError).
    """
    state_dir = settings.paths.resolved("state_dir")
    state_dir.mkdir(parents=True, exist_ok=True)
    return TrustStore.load(settings.paths.resolved_trust_file(), pin_dir=state_dir, missing_ok=True)


def open_store(settings: Settings) -> BundleStore:
    trust_file = settings.paths.resolved_trust_file()
    try:
        trust = load_trust(settings)
        store = BundleStore(
            settings.paths.resolved("state_dir"),
            trust,
            max_bundle_bytes=settings.limits.max_bundle_bytes,
        )
    except SigningError as e:
        raise ConfigError(str(e)) from e
    if not trust.doc.signers:
        log.warning(
            "the trust store trusts no signer: every bundle will be refused",
            extra={"trust_file": str(trust_file)},
        )
    # One flat key=value per fact (not the status dict), as docs/operator.md shows them.
    facts = {f"trust_{k}" if k == "version" else k: v for k, v in trust_status(store).items()}
    log.info("trust file loaded", extra={"trust_file": str(trust_file), **facts})
    return store


def trust_status(store: BundleStore) -> dict[str, object]:
    """The trust facts an operator checks: trust version, signed or not, the clock floor."""
    floor = store.clock_floor
    return {
        "version": store.trust.doc.version,
        "root_signed": store.trust.signed,
        "clock_floor": floor.isoformat() if floor is not None else None,
    }


async def service_ctx(app: web.Application) -> AsyncIterator[None]:
    """The registry and the service, empty: stage two (`_load_bundles`) fills them."""
    settings = app[SETTINGS]
    m = app[METRICS]
    store = open_store(settings)
    registry = Registry(store, app[DEPS], settings.trust.expiry, metrics=m)
    published: set[str] = set()
    registry.on_change.append(lambda: _publish_backends(registry, m, published))
    registry.on_change.append(lambda: m.set_expired(registry.expired))
    cloud = app.get(CLOUD)
    events = StoredEvents(app[STORE]) if settings.mqtt.host is not None else None
    samples = StoredSamples(app[STORE], settings.samples)
    status.add_provider(app, "samples", samples.status)
    service = InferenceService(
        registry.table, app[POOL], settings.limits, cloud=cloud, metrics=m,
        events=events, deferrer=deferrer(app), samples=samples, slots=app.get(SLOTS),
        log_limits=app.get(LOG_LIMITS),
    )  # fmt: skip
    service.opening()  # not ready before stage two is done, loaded or not
    bundle_dir = settings.paths.resolved("bundle_dir")
    bundle_dir.mkdir(parents=True, exist_ok=True)

    async def trust_changed() -> None:
        await apply_trust_file(app, registry, watcher)

    watcher = DirWatcher(
        bundle_dir,
        lambda p: registry.install(p, source=f"file {p.name}", origin=p),
        trust_file=settings.paths.resolved_trust_file(),
        on_trust_change=trust_changed,
    )
    app[REGISTRY], app[SERVICE], app[WATCHER], app[BUNDLE_STORE] = registry, service, watcher, store
    app[SERVICE_IMPL] = service
    status.add_provider(app, "loading", lambda: registry.loading)
    status.add_provider(app, "bundles", lambda: _bundle_status(registry))
    status.add_provider(app, "trust", lambda: trust_status(store))
    status.add_provider(app, "paths", settings.paths.effective)  # what doctor checks
    status.add_provider(app, "variables", lambda: app[VARIABLES].status(registry.table))
    try:
        yield
    finally:
        service.start_draining()
        await service.drained(settings.drain_s)
        await registry.close(settings.drain_s)


async def apply_trust_file(app: web.Application, registry: Registry, watcher: DirWatcher) -> bool:
    """Re-read the trust file (it changed on disk): unload what it no longer accepts, retry
    the files refused before. A refused trust file changes nothing; False then."""
    try:
        trust = await asyncio.to_thread(load_trust, app[LIVE].settings)
    except SigningError as e:
        log.error("trust file changed but is refused, keeping the running trust: %s", e)  # noqa: TRY400
        return False
    unloaded = await registry.apply_trust(trust)
    log.info(
        "trust file reloaded",
        extra={"signers": len(trust.doc.signers), "unloaded_by_trust": unloaded},
    )
    await watcher.rescan(retry_refused=True)
    return True


def _bundle_status(registry: Registry) -> dict[str, object]:
    return {
        "serving": registry.status(),
        "failures": [vars(e) for e in registry.failures()],
        "recent": [vars(e) for e in registry.events[-20:]],
        "expired": registry.expired,
    }


def _publish_backends(registry: Registry, m: Metrics, published: set[str]) -> None:
    """Keep the model-backend info series and the names metrics may label in step with what
    serves (unloads drop theirs)."""
    table = registry.table
    m.set_known_names(
        table.adapter_names(), [i.name for i in table.model_infos() if i.kind == "model"]
    )
    serving: set[str] = set()
    for slot in registry.table.slots().values():
        bundle = slot.current
        for name, served in bundle.models.items():
            d = served.details
            provider, precision = d.get("provider", "-"), d.get("precision", "-")
            m.set_model_backend(name, bundle.version, provider, precision)
            serving.add(name)
    for gone in published - serving:
        m.forget_model(gone)
    published.clear()
    published.update(serving)

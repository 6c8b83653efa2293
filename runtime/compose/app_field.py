"""The composition root's field resources (step 2 of `wasmgate.runtime.compose.app`): the
store-and-forward queue, the samples' OCI sink and the cloud fallback client with the
samples' HTTP sink, each opened and closed by one aiohttp ``cleanup_ctx`` entry.

With workers (``ROLE`` other than ``single``) every process appends to the one store file
(the supervisor reads its figures again each second) and shares one cloud breaker; only the
supervisor or a single process sends the samples.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from wasmgate.runtime.compose.app_keys import CLOUD, ROLE, SLOTS, STORE
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.field import setup as field_setup
from wasmgate.runtime.field.setup import build_store
from wasmgate.runtime.field.store import StoreError
from wasmgate.runtime.http import status
from wasmgate.runtime.http.keys import METRICS, SETTINGS
from wasmgate.runtime.ops.tasks import background

__all__ = ["cloud_ctx", "samples_oci_ctx", "store_ctx"]


async def store_ctx(app: web.Application) -> AsyncIterator[None]:
    try:
        async with build_store(app[SETTINGS]) as store:
            app[STORE] = store
            app[METRICS].watch_store(store.stats)
            status.add_provider(app, "store", lambda: field_setup.status_of(store))
            shared = app[ROLE] != "single"  # the file is every process's
            async with background(field_setup.upkeep(store, shared=shared), "store-upkeep"):
                yield
    except StoreError as e:
        raise ConfigError(str(e)) from e


async def samples_oci_ctx(app: web.Application) -> AsyncIterator[None]:
    # Imported here: the sink brings oras, requests and jsonschema (~70 ms, ~6 MB at start).
    from wasmgate.runtime.field.samples_oci import OciSamples  # noqa: PLC0415

    with OciSamples.of(app[STORE], app[SETTINGS]) as sink:
        status.add_provider(app, "samples_oci", sink.status)
        async with background(sink.run(), "samples-oci"):
            yield


async def cloud_ctx(app: web.Application) -> AsyncIterator[None]:
    # Imported here: only a daemon with cloud.url uses them (~2.5 ms of every start without).
    from wasmgate.runtime.cloud.client import CloudFallback  # noqa: PLC0415
    from wasmgate.runtime.field.samples_http import HttpSamples  # noqa: PLC0415

    m = app[METRICS]
    settings = app[SETTINGS]
    # One breaker for the gateway: its workers open and close it together.
    shared = app[SLOTS].path.with_name("cloud-breaker") if SLOTS in app else None
    async with CloudFallback(settings.cloud, shared=shared) as cloud:
        app[CLOUD] = cloud

        m.watch_breaker(lambda: str(cloud.breaker.current()))
        status.add_provider(app, "cloud", lambda: cloud.state)
        path = settings.samples.http_path
        if path is None or app[ROLE] == "worker":  # one process sends the samples
            yield
            return
        sink = HttpSamples(
            app[STORE], cloud, path,
            retry_s=settings.cloud.breaker_reset_s, rate=settings.store.drain_rate,
        )  # fmt: skip
        status.add_provider(app, "samples_http", sink.status)
        async with background(sink.run(), "samples-http"):
            yield

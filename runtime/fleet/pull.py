"""The daemon's bundle puller: by digest, from an OCI registry into the pull cache.

fleetd's reconcile loop calls :meth:`BundlePuller.pull` with a fleet document's ``ref``
(``HOST:PORT/REPO@sha256:<manifest digest>``) and installs the returned file through the
normal signed path (``BundleStore``: signature, anti-rollback). The registry is only
transport: nothing here decides whether a bundle may run.

Per pull: the manifest is fetched by digest and must hash to it; its single layer's declared
size is checked against ``registry.max_bundle_bytes`` before the layer is requested; the
layer is streamed with that cap into the cache and must hash to its descriptor's digest
(``oci.py``). A manifest already held (re-hashed on every use) costs no request at all,
and a layer held under another manifest is not downloaded again; concurrent pulls of one
digest wait for each other. A registry that does not answer is retried ``registry.retries``
times with exponential backoff (jittered, capped, cancellable, never past the caller's
deadline), then :class:`RegistryUnavailable` (retryable: fleetd reports ``pending``). A
refusal (:class:`ArtifactRefused`: digest, size, media type) is never retried.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from wasmgate._compat import Self, timeout
from wasmgate.runtime.fleet.pullcache import PullCache
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import (
    Artifact,
    ArtifactRefused,
    Reference,
    RegistryUnavailable,
    parse_manifest,
    retry_delay,
)
from wasmgate.runtime.ops.config import RegistrySettings, Settings

log = logging.getLogger("wasmgate.fleet")


@dataclass(frozen=True)
class PulledBundle:
    """A bundle held in the cache: install ``path`` (the ``.wgb`` bytes) through the store."""

    ref: str
    digest: str
    layer_digest: str
    size: int
    path: Path
    annotations: dict[str, str]
    downloaded: bool
    """False when the layer was already held (no layer request was made)."""


@dataclass
class PullStats:
    """Counters for status, metrics and the benchmark (one download per digest)."""

    downloads: int = 0
    bytes_downloaded: int = 0
    held: int = 0
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_bytes(self, n: int) -> None:
        with self._lock:  # called from download threads
            self.bytes_downloaded += n


class BundlePuller:
    """Owned by the daemon's fleet service (one per daemon); :meth:`pull` is its one job."""

    def __init__(
        self,
        settings: RegistrySettings,
        cache_dir: Path,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._settings = settings
        self.cache = PullCache(cache_dir)
        self.stats = PullStats()
        self._sleep = sleep
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @classmethod
    def for_daemon(cls, settings: Settings) -> Self:
        """The daemon's puller: ``[registry]`` settings, cache in ``<state_dir>/pulled``."""
        return cls(settings.registry, settings.paths.resolved("state_dir") / "pulled")

    async def pull(self, ref: str, *, deadline: float | None = None) -> PulledBundle:
        """Fetch ``ref`` (pinned by digest) unless held; ``deadline`` is a ``time.monotonic()``
        instant after which no further try starts. Raises a :class:`RegistryError`."""
        try:
            parsed = Reference.parse(ref)
        except ValueError as e:
            raise ArtifactRefused(str(e)) from e
        if parsed.digest is None:
            raise ArtifactRefused(f"{ref}: a fleet ref names its manifest by @sha256: digest")
        digest = parsed.digest
        lock = self._locks.setdefault(digest, asyncio.Lock())
        self._users[digest] = self._users.get(digest, 0) + 1
        try:
            async with lock:
                return await self._pull_retrying(parsed, deadline)
        finally:  # the last waiter drops the lock: the map holds only pulls in progress
            self._users[digest] -= 1
            if self._users[digest] == 0:
                del self._users[digest], self._locks[digest]

    async def _pull_retrying(self, ref: Reference, deadline: float | None) -> PulledBundle:
        held = await asyncio.to_thread(self.held, ref)
        if held is not None:
            self.stats.held += 1
            return held
        tries = self._settings.retries + 1
        for attempt in range(tries):
            try:
                return await self._attempt(ref, deadline)
            except RegistryUnavailable as e:
                if attempt + 1 == tries:
                    raise RegistryUnavailable(f"{e} (gave up after {tries} tries)") from e
                delay = self._backoff(attempt)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise RegistryUnavailable(f"{e} (deadline: no time for a retry)") from e
                log.warning("registry: %s; retry %d/%d in %.1fs", e, attempt + 1, tries - 1, delay)
                self.stats.retries += 1
                await self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _backoff(self, attempt: int) -> float:
        return retry_delay(self._settings.backoff_s, self._settings.backoff_max_s, attempt)

    async def _attempt(self, ref: Reference, deadline: float | None) -> PulledBundle:
        """One try on a thread; cancelling (or the deadline) stops the download's loop."""
        stop = threading.Event()
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            async with timeout(remaining):
                return await asyncio.to_thread(self._fetch, ref, stop)
        except TimeoutError:
            raise RegistryUnavailable(f"{ref}: deadline passed during the pull") from None
        finally:
            stop.set()  # the thread ends at its next chunk if it is still running

    def _fetch(self, ref: Reference, stop: threading.Event) -> PulledBundle:
        client = OciClient(ref.host, self._settings)
        try:
            art = client.resolve(ref, self._settings.max_bundle_bytes)
            layer = self.cache.verified(art.layer_digest)
            fetched = layer is None
            if layer is None:
                with self.cache.writer(art.layer_digest) as sink:
                    client.download(ref, art, sink, stop, self.stats.add_bytes)
                layer = self.cache.path(art.layer_digest)
                self.stats.downloads += 1
            self.cache.put_bytes(art.digest, art.manifest)  # after the layer: see pullcache
        finally:
            client.close()
        log.info("registry: pulled %s (%d bytes)", ref, art.layer_size)
        return _pulled(ref, art, layer, downloaded=fetched)

    def held(self, ref: Reference) -> PulledBundle | None:
        """The bundle if its manifest and layer are in the cache and intact (blocking)."""
        if ref.digest is None:
            return None
        manifest = self.cache.verified(ref.digest)
        if manifest is None:
            return None
        try:
            art = parse_manifest(
                manifest.read_bytes(), ref.digest, str(ref), self._settings.max_bundle_bytes
            )
        except ArtifactRefused:  # held under an older, larger cap: fetch decides again
            return None
        layer = self.cache.verified(art.layer_digest)
        return None if layer is None else _pulled(ref, art, layer, downloaded=False)

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Drop every cached artifact but the refs in ``keep`` (blocking); returns digests."""
        digests: set[str] = set()
        for text in keep:
            held = self.held(Reference.parse(text))
            if held is not None:
                digests |= {held.digest, held.layer_digest}
        return self.cache.prune(digests)


def _pulled(ref: Reference, art: Artifact, layer: Path, *, downloaded: bool) -> PulledBundle:
    return PulledBundle(
        str(ref), art.digest, art.layer_digest, art.layer_size, layer, art.annotations, downloaded
    )

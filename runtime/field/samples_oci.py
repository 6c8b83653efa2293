"""The OCI sink of hard examples: the ``samples`` stream pushed to a registry as artifacts.

With ``samples.oci_repository`` (``HOST[:PORT]/REPO``), the kept samples (one JSON document
each, `wasmgate.runtime.field.samples`) are pushed oldest first, in batches of consecutive
samples of one adapter and bundle version (at most ``samples.oci_batch`` and
`MAX_BATCH_BYTES`), each batch one OCI artifact (`wasmgate.runtime.oci.client`,
``OciClient.push_bytes``): one JSON Lines layer (`ARTIFACT_TYPE`, the stored documents as
they are, one per line), the empty config, and annotations naming the gateway, adapter,
bundle, version, store ids and time range. The tag is ``<UTC time of the first sample>-
<gateway>-<store id of the first sample>``: unique, and sorting tags sorts batches by time.

Delivery is that of the other sinks: a batch is acked (deleted) in the store only once the
registry answered its manifest PUT ``201 Created``. Any failure keeps the samples and tries
the same batch again after a backoff (``registry.backoff_s`` doubled up to
``registry.backoff_max_s``, with jitter); a refusal (4xx) splits the batch into single
samples. A batch pushed again after a crash or a timeout gets the same tag (its first sample
decides), so a retry replaces, never repeats. oras is blocking: each push runs on the sink's
one thread under a deadline, so the event loop never waits for the registry. This sink
replaces the MQTT one (a stream has one consumer: an acked sample is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol

from wasmgate._compat import UTC, Self, timeout
from wasmgate.runtime.field.forward import Pace
from wasmgate.runtime.field.samples import SAMPLES
from wasmgate.runtime.field.store import Record, Store
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import (
    BUNDLE_NAME,
    BUNDLE_VERSION,
    Reference,
    RegistryError,
    retry_delay,
)
from wasmgate.runtime.ops.config import RegistrySettings, Settings
from wasmgate.runtime.ops.tasks import wake_or_timeout
from wasmgate.runtime.protocol import jsonio

log = logging.getLogger("wasmgate.field")
ARTIFACT_TYPE = "application/vnd.wasmgate.samples.v1+jsonl"
"""``artifactType`` of the manifest and media type of its one layer (JSON Lines)."""
MAX_BATCH_BYTES = 4 * 1024 * 1024
"""Layer size at most (a single larger sample still goes, alone)."""
GATEWAY = "dev.wasmgate.gateway"
ADAPTER = "dev.wasmgate.samples.adapter"
COUNT = "dev.wasmgate.samples.count"
IDS = "dev.wasmgate.samples.ids"
"""Store ids of the samples in the layer, in order, comma-separated."""
FIRST_AT = "dev.wasmgate.samples.first-at"
LAST_AT = "dev.wasmgate.samples.last-at"
CREATED = "org.opencontainers.image.created"
_IDLE_S = 1.0
"""Longest sleep with nothing to push (the store's wake-up usually comes first)."""


@dataclass(frozen=True)
class Batch:
    """Consecutive samples of one adapter and bundle version: one artifact."""

    records: list[Record]
    adapter: str
    bundle: str | None
    version: str | None

    @property
    def ids(self) -> list[int]:
        return [r.id for r in self.records]

    @property
    def layer(self) -> bytes:
        # A raw newline in JSON is only ever whitespace between tokens (strings escape it),
        # so a space keeps the document and the one-per-line framing both intact.
        lines = [r.payload.replace(b"\r", b" ").replace(b"\n", b" ") for r in self.records]
        return b"\n".join(lines) + b"\n"

    def tag(self, gateway: str) -> str:
        first = self.records[0]
        when = datetime.fromtimestamp(first.at, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        return f"{when}-{_tag_safe(gateway)}-{first.id}"

    def annotations(self, gateway: str, created: str) -> dict[str, str]:
        notes = {
            GATEWAY: gateway,
            ADAPTER: self.adapter,
            COUNT: str(len(self.records)),
            IDS: ",".join(map(str, self.ids)),
            FIRST_AT: _rfc3339(self.records[0].at),
            LAST_AT: _rfc3339(self.records[-1].at),
            CREATED: created,
        }
        if self.bundle is not None:
            notes[BUNDLE_NAME] = self.bundle
        if self.version is not None:
            notes[BUNDLE_VERSION] = self.version
        return notes


def next_batch(recs: list[Record], max_bytes: int = MAX_BATCH_BYTES) -> Batch:
    """The longest prefix of ``recs`` (not empty) of one origin within ``max_bytes``."""
    key = _origin(recs[0])
    taken, size = [recs[0]], len(recs[0].payload) + 1
    for rec in recs[1:]:
        size += len(rec.payload) + 1
        if size > max_bytes or _origin(rec) != key:
            break
        taken.append(rec)
    return Batch(taken, *key)


def _origin(rec: Record) -> tuple[str, str | None, str | None]:
    adapter = str(rec.meta.get("adapter", ""))
    try:
        doc: Any = jsonio.loads(rec.payload)
    except (ValueError, RecursionError):  # shipped as stored, under its adapter
        return adapter, None, None
    if not isinstance(doc, dict):
        return adapter, None, None
    bundle, version = doc.get("bundle"), doc.get("version")
    return (
        adapter,
        None if bundle is None else str(bundle),
        None if version is None else str(version),
    )


def _tag_safe(text: str) -> str:
    kept = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in text)
    return kept[:64] or "_"


class Pusher(Protocol):
    def push_bytes(
        self, data: bytes, ref: Reference, kind: str, title: str, annotations: dict[str, str]
    ) -> str: ...

    def close(self) -> None: ...


class OciSamples:
    """Owns the sink's thread and registry client: run `run` as a task, then `close`."""

    def __init__(
        self,
        store: Store,
        repository: str,
        registry: RegistrySettings,
        gateway: str,
        *,
        batch: int,
        rate: float,
        client: Callable[[str, RegistrySettings], Pusher] = OciClient,
    ) -> None:
        self._store = store
        self._repo = Reference.parse(f"{repository}:latest")
        self._conf = registry
        self._gateway = gateway
        self._batch = batch
        self._pace = Pace(rate, 1)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="samples-oci")
        self._client = client(self._repo.host, registry)
        self._wake = asyncio.Event()
        store.watch(SAMPLES, self._wake)
        self._single_through = 0  # records up to this id go one per artifact (a refusal)
        self._failures = 0
        self.shipped = 0
        self.artifacts = 0
        self.failed = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None

    @classmethod
    def of(cls, store: Store, settings: Settings) -> Self:
        conf = settings.samples
        if conf.oci_repository is None:
            raise ValueError("samples.oci_repository is not set")
        return cls(
            store, conf.oci_repository, settings.registry, settings.mqtt.resolved_gateway_id(),
            batch=conf.oci_batch, rate=settings.store.drain_rate,
        )  # fmt: skip

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        # Queued behind a push still running: the client closes when its thread is done
        # with it, and nothing here waits for the registry.
        with contextlib.suppress(RuntimeError):  # already shut down
            self._thread.submit(self._client.close)
        self._thread.shutdown(wait=False, cancel_futures=False)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            recs = await self._store.peek(SAMPLES, limit=self._batch)
            if not recs:
                await wake_or_timeout(self._wake, _IDLE_S)  # ends on cancel (gh-86296)
                continue
            single = recs[0].id <= self._single_through
            batch = next_batch(recs[:1] if single else recs)
            await self._pace.take()
            if await self._push(batch):
                await self._store.ack(SAMPLES, batch.ids)
                self.shipped += len(batch.ids)
                self.artifacts += 1
                self._failures = 0
            else:
                await asyncio.sleep(self._backoff())

    async def _push(self, batch: Batch) -> bool:
        """One try on the sink's thread, within the deadline; False: keep and retry."""
        ref = Reference(self._repo.host, self._repo.repo, batch.tag(self._gateway))
        notes = batch.annotations(self._gateway, _rfc3339(time.time()))
        loop = asyncio.get_running_loop()
        call = loop.run_in_executor(
            self._thread,
            self._client.push_bytes, batch.layer, ref, ARTIFACT_TYPE, f"{ref.tag}.jsonl", notes,
        )  # fmt: skip
        try:
            async with timeout(self._deadline_s()):
                await call
        except Exception as e:
            self._failed(batch, ref, e)
            return False
        log.info("samples: pushed %d to %s", len(batch.ids), ref)
        return True

    def _failed(self, batch: Batch, ref: Reference, e: Exception) -> None:
        if isinstance(e, TimeoutError):
            e = TimeoutError(f"no answer within {self._deadline_s():.0f}s")
        self.failed += 1
        self._failures += 1
        self.last_error, self.last_error_at = f"{type(e).__name__}: {e}"[:500], time.time()
        refused = isinstance(e, RegistryError) and not e.retryable
        if refused and len(batch.ids) > 1:  # a batch the registry will not take: try singly
            self._single_through = max(self._single_through, batch.ids[-1])
        level = logging.ERROR if refused else logging.WARNING
        log.log(level, "samples: push of %d to %s failed (kept): %s", len(batch.ids), ref, e)

    def _deadline_s(self) -> float:
        # A push is up to seven requests (two blobs: HEAD, POST, PUT; the manifest), each
        # with registry.timeout_s; a registry that trickles its answers is cut off here.
        return 3 * self._conf.timeout_s

    def _backoff(self) -> float:
        return retry_delay(self._conf.backoff_s, self._conf.backoff_max_s, self._failures - 1)

    def status(self) -> dict[str, object]:
        return {
            "repository": f"{self._repo.host}/{self._repo.repo}",
            "shipped": self.shipped,
            "artifacts": self.artifacts,
            "failed": self.failed,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        }


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

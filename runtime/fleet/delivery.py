"""Where fleet documents come from: retained MQTT topics and the air-gapped desired file.

- MQTT: ``<prefix>/<gateway>/desired`` and ``<prefix>/fleet/<group>/desired`` per configured
  group, read through the bridge's connection (`MqttBridge` channels; never through
  ``$share``: every gateway needs every document). The broker replays the retained documents
  at every (re)connect, so a gateway that was offline converges when it comes back. An
  empty retained payload clears that source. Precedence is decided among the held documents
  that verify now (`Target.judge`: signatures, threshold, target, scope, expiry, serial above
  the last applied): the gateway's own, else the group document of the highest verified
  serial. What a document merely claims decides nothing, so a forged or stale one (retained
  by any client that may publish there) never shadows a valid one; it is reported once
  (`Target.refuse`: status, report, metric) and forgotten when its topic is cleared.
- The file (``fleet.desired_file``): polled every second like the bundle directory (offered
  once its size and mtime settled for one poll) and re-read on SIGHUP.
- ``PUT /v1/desired`` offers directly (``runtime/http/manage.py``).

All of them call `Reconciler.offer`, which decides; the same bytes are offered once (a
replayed retained document after a reconnect is no news), until `reread` (SIGHUP: the trust
may have changed, so a document refused before may pass now).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wasmgate.runtime.bundles.watcher import FileKey, file_key
from wasmgate.runtime.errors import DocumentRefused
from wasmgate.runtime.ops.tasks import background, wake_or_timeout
from wasmgate.signing.errors import FleetReplayError, SigningError

if TYPE_CHECKING:  # the mqtt package imports paho: only a daemon with MQTT needs it
    from wasmgate.runtime.mqtt.messages import Incoming

log = logging.getLogger("wasmgate.fleet")

_POLL_S = 1.0


class Target(Protocol):
    """What documents are delivered to (the `Reconciler`)."""

    async def offer(self, data: bytes, source: str) -> bool:
        """Accept ``data`` (False: already the accepted one); raises `DocumentRefused`."""

    async def judge(self, data: bytes) -> int:
        """The serial ``data`` would apply at; raises `SigningError`. Records nothing."""

    def refuse(self, data: bytes, source: str, e: SigningError) -> None:
        """Report a refusal `judge` found."""


def desired_topics(prefix: str, gateway: str, groups: tuple[str, ...]) -> tuple[str, ...]:
    """The gateway's own topic first (its retained document arrives before the groups')."""
    root = prefix.rstrip("/")
    return (f"{root}/{gateway}/desired", *(f"{root}/fleet/{g}/desired" for g in groups))


class Delivery:
    """Holds the latest document of each source and offers the one that applies."""

    def __init__(
        self,
        target: Target,
        topics: tuple[str, ...],
        desired_file: Path | None,
        max_bytes: int,
    ) -> None:
        self._target = target
        self.topics = topics
        """Gateway topic first, then one per group (MQTT filters, no wildcards)."""
        self._file = desired_file
        self._max = max_bytes
        self._held: dict[str, bytes] = {}
        self._offered: dict[str, bytes] = {}
        self._reported: dict[str, bytes] = {}
        """Topic -> the refused document last reported for it (each is reported once)."""
        self.choice: tuple[str, bytes] | None = None
        """(topic, document) chosen at the last pass; None when none verifies."""
        self._kick = asyncio.Event()
        self.received = 0
        """Documents taken from MQTT so far (cleared ones too; oversize ones are not)."""
        self.handled = 0
        """How many of ``received`` a finished pass has seen: once ``handled == received``
        every document in has been chosen among and offered (what a test waits on)."""
        self._file_key: FileKey | None = None
        self._file_pending: FileKey | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        await self._poll_file(settle=False)  # the file applies at start, before MQTT
        async with background(self._run(), "fleet-delivery"):
            yield

    # -- MQTT ---------------------------------------------------------------------------

    def on_message(self, msg: Incoming) -> None:
        """A retained (or live) document on one of `topics` (called on the loop)."""
        if msg.topic not in self.topics:
            return
        if len(msg.payload) > self._max:
            log.warning(
                "fleet document on %s ignored: %d bytes exceed fleet.max_document_bytes",
                msg.topic,
                len(msg.payload),
            )
            return
        if msg.payload:
            self._held[msg.topic] = msg.payload
        else:
            self._held.pop(msg.topic, None)  # cleared by the operator
            self._reported.pop(msg.topic, None)
        self.received += 1
        self._kick.set()

    async def choose(self) -> tuple[str, bytes] | None:
        """(topic, document) that applies: the gateway's own if it verifies, else the group
        document with the highest verified serial (the earlier configured group on a tie).

        Every held document is judged, so a refused one is reported even while another
        applies."""
        own: tuple[str, bytes] | None = None
        best: tuple[tuple[int, int], str, bytes] | None = None
        for index, topic in enumerate(self.topics):
            data = self._held.get(topic)  # read per topic: on_message may run meanwhile
            serial = None if data is None else await self._judge(topic, data)
            if data is None or serial is None:
                continue
            if index == 0:
                own = (topic, data)
            elif best is None or (serial, -index) > best[0]:
                best = ((serial, -index), topic, data)
        self.choice = own or (None if best is None else (best[1], best[2]))
        return self.choice

    async def _judge(self, topic: str, data: bytes) -> int | None:
        try:
            return await self._target.judge(data)
        except SigningError as e:
            self._refused(topic, data, e)
        except Exception:
            log.exception("fleet document on %s could not be checked", topic)
        return None

    def _refused(self, topic: str, data: bytes, e: SigningError) -> None:
        if self._reported.get(topic) == data:
            return
        self._reported[topic] = data
        if isinstance(e, FleetReplayError) and topic != self.topics[0]:
            # A genuine but older group document (a newer one applied, or another group is
            # ahead): superseded, not an attack worth a refusal in the report.
            log.info("fleet document on %s superseded: %s", topic, e)
            return
        self._target.refuse(data, f"mqtt {topic}", e)

    async def _run(self) -> None:
        while True:
            poll = _POLL_S if self._file is not None else None  # idle: no wake-ups
            await wake_or_timeout(self._kick, poll)  # ends on cancel (gh-86296)
            self._kick.clear()
            seen = self.received
            choice = await self.choose()
            if choice is not None:
                await self._offer(f"mqtt {choice[0]}", choice[1])
            self.handled = seen
            await self._poll_file(settle=True)

    async def _offer(self, source: str, data: bytes) -> None:
        key = "file" if source == "file" else "mqtt"
        if self._offered.get(key) == data:
            return
        self._offered[key] = data
        try:
            await self._target.offer(data, source)
        except DocumentRefused:
            pass  # kept by the reconciler for the report; the log has a line
        except Exception:
            log.exception("fleet document from %s could not be handled", source)

    # -- the desired file ---------------------------------------------------------------

    async def _poll_file(self, *, settle: bool) -> None:
        if self._file is None:
            return
        key = file_key(self._file)
        if key is None or key == self._file_key:
            self._file_pending = None
            return
        if settle and self._file_pending != key:
            self._file_pending = key  # still being written: wait one poll
            return
        self._file_key, self._file_pending = key, None
        data = await asyncio.to_thread(self._read_file, self._file)
        if data is not None:
            await self._offer("file", data)

    def _read_file(self, path: Path) -> bytes | None:
        try:
            with path.open("rb") as f:
                data = f.read(self._max + 1)
        except OSError as e:
            log.warning("fleet.desired_file %s: cannot read: %s", path, e)
            return None
        if len(data) > self._max:
            log.warning("fleet.desired_file %s: larger than fleet.max_document_bytes", path)
            return None
        return data

    async def reread(self) -> None:
        """SIGHUP: offer the file and the chosen MQTT document again, even if unchanged."""
        self._offered.clear()
        self._reported.clear()  # the trust may have changed: a refusal may be news again
        self._file_key = None
        await self._poll_file(settle=False)
        self._kick.set()

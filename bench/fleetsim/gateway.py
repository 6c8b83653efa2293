"""One simulated gateway: the daemon's `FleetMember` over the daemon's `MqttClient`.

What is real: the MQTT session (persistent, QoS 1, the retained documents replayed at each
connect), `Delivery` and `Reconciler` (signature, threshold, target, scope, expiry, serial
and downgrade checks; the state file), the `Reporter` and its retained report, and the
`BundlePuller` (manifest by digest from the registry, layer verified by digest). The
bundle's own signature is verified against the trust file as an install does.

What is not: the sandbox. `SimRegistry` stands in for the daemon's bundle registry: it
verifies the pulled bundle (`verify_bundle`) and then notes name and version instead of
loading and selftesting it. `SharedLayers` keeps each gateway's manifests in its own
directory but the layers in one shared directory, so N gateways need one disk copy of a
bundle: each gateway still asks the registry for the manifest (as a real one does), and
only a layer nobody has yet is downloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.errors import BundleRejected
from wasmgate.runtime.fleet.apply import PullDeferred
from wasmgate.runtime.fleet.member import FleetMember, fleet_verifier
from wasmgate.runtime.fleet.pull import BundlePuller
from wasmgate.runtime.fleet.pullcache import PullCache
from wasmgate.runtime.mqtt.client import MqttClient
from wasmgate.runtime.mqtt.messages import Incoming, Outgoing
from wasmgate.runtime.oci.ocitypes import RegistryUnavailable
from wasmgate.runtime.ops.config import Settings, settings_from
from wasmgate.signing.errors import SigningError
from wasmgate.signing.state import atomic_write
from wasmgate.signing.trust import TrustStore
from wasmgate.signing.verify import verify_bundle

if TYPE_CHECKING:
    from wasmgate.signing.fleetdoc import Downgrade

MAX_BUNDLE_BYTES = 64 * 1024 * 1024


class SharedLayers(PullCache):
    """Manifests in ``own`` (one gateway's), layers in ``shared`` (every gateway's)."""

    def __init__(self, own: Path, shared: Path) -> None:
        super().__init__(own)  # own/tmp: each gateway's downloads in progress
        self._own = own
        shared.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root = shared  # `path` names the shared layer; `put_bytes` writes to own

    def put_bytes(self, digest: str, data: bytes) -> Path:
        path = self._own / self.path(digest).name
        atomic_write(path, data)
        return path

    def verified(self, digest: str) -> Path | None:
        own = self._own / self.path(digest).name
        if own.exists():  # a manifest this gateway fetched
            return self._check(own, digest)
        return super().verified(digest)

    def _check(self, path: Path, digest: str) -> Path | None:
        import hashlib  # noqa: PLC0415

        return path if "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == digest else None

    @contextlib.contextmanager
    def writer(self, digest: str) -> Iterator[BinaryIO]:
        with super().writer(digest) as f:  # renamed from own/tmp into shared (one filesystem)
            yield f


@dataclass
class _Current:
    version: int
    digest: str


@dataclass
class _Slot:
    current: _Current
    candidate: None = None
    percent: int = 0


@dataclass
class _Table:
    slots_: dict[str, _Slot] = field(default_factory=dict)

    def slots(self) -> dict[str, _Slot]:
        return dict(self.slots_)


class SimRegistry:
    """The bundle registry without the sandbox: verify the bundle, note what serves."""

    def __init__(self, trust: TrustStore) -> None:
        self._trust = trust
        self.table = _Table()
        self.on_change: list[Callable[[], None]] = []

    async def install(
        self, data: bytes | Path, *, downgrades: list[Downgrade] | None = None, **_: Any
    ) -> None:
        """Verify as an install does (signature, signer's names, expiry), and keep the
        store's anti-rollback rule: a lower version needs the document's permission."""
        try:
            ok = await asyncio.to_thread(
                verify_bundle, data, self._trust, max_bundle_bytes=MAX_BUNDLE_BYTES
            )
        except SigningError as e:
            raise BundleRejected(f"verification failed: {e}") from e
        m = ok.manifest
        slot = self.table.slots_.get(m.name)
        granted = {(d.name, d.version) for d in downgrades or []}
        if (
            slot is not None
            and m.version < slot.current.version
            and (m.name, m.version) not in granted
        ):
            raise BundleRejected(f"{m.name} v{m.version} is below v{slot.current.version}")
        self.table.slots_[m.name] = _Slot(_Current(m.version, f"sha256:{ok.digest}"))
        self._changed()

    async def remove(self, name: str) -> _Current:
        slot = self.table.slots_.pop(name)
        self._changed()
        return slot.current

    async def promote(self, name: str, source: str = "api") -> None:
        """No staged candidates in the simulation."""

    async def abort(self, name: str, source: str = "api", why: str = "") -> None:
        """No staged candidates in the simulation."""

    def _changed(self) -> None:
        for hook in self.on_change:
            hook()


@dataclass(frozen=True)
class SimConfig:
    """What every gateway of a worker shares."""

    host: str
    port: int
    root: Path
    """Each gateway's state in ``root/<gateway>``; the shared layers in ``root/layers``."""
    group: str
    spread_s: float = 0.0
    """``mqtt.reconnect_spread_s`` (the simulator sets N / 100 s, as docs/fleet.md says)."""


class SimGateway:
    """One gateway: `start` connects (again), `stop` drops the connection, `close` ends it."""

    def __init__(self, name: str, cfg: SimConfig, trust: TrustStore, events: Events) -> None:
        self.name = name
        self._cfg = cfg
        self._events = events
        self.settings = self._settings(cfg, name)
        self.registry = SimRegistry(trust)
        own = self.settings.paths.resolved("state_dir") / "pulled"
        self._puller = _puller(self.settings, own, cfg.root / "layers")
        verify = fleet_verifier(lambda: trust, name, (cfg.group,))
        self.member = FleetMember(self.settings, cast(Registry, self.registry), verify, self._pull)
        self.client: MqttClient | None = None
        self.failing = False
        """Pulls fail (a broken disk, a proxy that refuses this gateway): the 3 % case."""
        self._stack = contextlib.AsyncExitStack()

    @staticmethod
    def _settings(cfg: SimConfig, name: str) -> Settings:
        return settings_from({
            "mqtt": {"host": cfg.host, "port": cfg.port, "gateway_id": name,
                     "client_id": f"sim-{name}", "reconnect_spread_s": cfg.spread_s},
            "fleet": {"groups": [cfg.group], "retry_initial_s": 1.0, "retry_max_s": 30.0},
            "paths": {"data_dir": str(cfg.root / name)},
            "registry": {"insecure": True, "retries": 2},
        })  # fmt: skip

    async def _pull(self, ref: str) -> Path:
        self._events.pull(self.name)
        if self.failing:
            raise RuntimeError("simulated: this gateway's pulls fail")
        try:
            pulled = await self._puller.pull(ref)
        except RegistryUnavailable as e:
            raise PullDeferred(str(e)) from e
        return pulled.path

    async def open(self) -> None:
        await self._stack.enter_async_context(self.member)
        await self.start()

    async def start(self) -> None:
        """Connect with the daemon's client (a new one: as a restarted gateway would)."""
        m = self.member
        prefix = self.settings.mqtt.topic_prefix
        will = Outgoing(f"{prefix}/{self.name}/status", b"offline", qos=1, retain=True)
        args = m.channel_args()

        def connected(_session: bool) -> None:
            self._events.connect(self.name)
            assert self.client is not None
            self.client.subscribe(list(args["filters"]), 1)
            args["on_connect"]()

        def message(msg: Incoming) -> None:
            args["on_message"](msg)
            if self.client is not None:
                self.client.ack(msg)

        self.client = MqttClient(
            self.settings.mqtt, f"sim-{self.name}", will=will,
            on_connect=connected, on_message=message,
        )  # fmt: skip
        self.client.start()
        self._over = m.over_mqtt(self.client)
        await self._over.__aenter__()

    async def stop(self) -> None:
        """Gone from the network (power cut): the broker keeps the session."""
        client, self.client = self.client, None
        if client is not None:
            await self._over.__aexit__(None, None, None)
            await client.stop(None)

    async def close(self) -> None:
        await self.stop()
        await self._stack.aclose()


class Events:
    """Per-second counts of connects and pulls in this worker (what the restart measures)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.connects: dict[int, int] = {}
        self.pulls: dict[int, int] = {}
        self.connected: dict[str, float] = {}

    def connect(self, name: str) -> None:
        now = self._clock()
        self.connected[name] = now
        self.connects[int(now)] = self.connects.get(int(now), 0) + 1

    def pull(self, _name: str) -> None:
        now = int(self._clock())
        self.pulls[now] = self.pulls.get(now, 0) + 1


def _puller(settings: Settings, own: Path, shared: Path) -> BundlePuller:
    puller = BundlePuller(settings.registry, own)
    puller.cache = SharedLayers(own, shared)
    return puller

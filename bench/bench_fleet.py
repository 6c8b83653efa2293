"""Fleet: rollout time for 3 daemons, bytes pulled per gateway, the idle cost of membership.

``python -m bench.bench_fleet [--quick] [--json OUT]``

Real parts on loopback (docker-registry, mosquitto, daemons, ``wasmgate fleet rollout``):

- rollout: wall time of ``fleet rollout`` (waves ``1,100%``) of probe v2 until the three
  member daemons reported ``applied``, against one ``PUT /v1/bundles`` of the same bundle
  to a daemon outside the fleet that already ran v1, like the members (the install path
  without the fleet around it);
- bytes pulled per gateway: layer bytes the registry served (its access log) per member,
  against the bundle's size (one download per digest: the ratio is 1.0);
- idle cost over a window (60 s; 3 s with ``--quick``): CPU seconds and RSS growth of a
  member daemon against a daemon on the same broker that is in no group, and the MQTT
  messages on each gateway's topics, scaled to an hour.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from bench.common import Figure, cpu_seconds, script_main
from tests.fixtures.benchkit import daemon_pid, rss_mb
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.reliability.conftest import put_bundle
from tests.runtime.fleet.e2ekit import PREFIX, RealFleet, dump
from wasmgate.runtime.mqtt._paho_private import close_threaded


@contextmanager
def _daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    try:
        yield started
    finally:
        for d in started:
            d.kill()


def _factory(root: Path, started: list[Daemon]) -> Callable[..., Daemon]:
    """``daemon_factory`` of the tests, outside pytest: every daemon is killed at the end."""

    def start(config: dict[str, Any], name: str) -> Daemon:
        (root / name).mkdir(parents=True, exist_ok=True)
        daemon = Daemon(root / name, config)
        started.append(daemon)
        daemon.start(timeout=180)
        return daemon

    return start


class _Counter:
    """Counts the MQTT messages on each gateway's topics (``<prefix>/<gateway>/...``)."""

    def __init__(self, broker: Broker) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
        self._client.on_message = self._on_message
        self._client.connect(broker.host, broker.port)
        self._client.loop_start()
        self._client.subscribe(f"{PREFIX}/#", qos=0)
        time.sleep(1.0)  # the retained burst is not idle traffic, but proves we count
        if not self.counts:
            raise RuntimeError("the message counter saw no retained report: not subscribed")
        self.reset()

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        gateway = msg.topic[len(PREFIX) + 1 :].split("/", 1)[0]
        with self._lock:
            self.counts[gateway] = self.counts.get(gateway, 0) + 1

    def reset(self) -> None:
        with self._lock:
            self.counts = {}

    def close(self) -> None:
        close_threaded(self._client)


def _put(daemon: Daemon, bundle: Path) -> None:
    status, body = put_bundle(daemon, bundle.read_bytes())
    if status != 201:
        raise RuntimeError(f"PUT /v1/bundles refused: {status} {body!r}")


def _idle(member: Daemon, other: Daemon, counter: _Counter, window: float) -> dict[str, float]:
    pids = {"member": daemon_pid(member), "other": daemon_pid(other)}
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    rss0 = {k: rss_mb(p) for k, p in pids.items()}
    counter.reset()
    time.sleep(window)
    out = {f"{k}_cpu": cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
    out |= {f"{k}_rss": rss_mb(p) - rss0[k] for k, p in pids.items()}
    per_hour = 3600 / window
    out["member_msgs"] = counter.counts.get("gw-0", 0) * per_hour
    out["other_msgs"] = counter.counts.get("solo", 0) * per_hour
    return out


def _measure(root: Path, quick: bool) -> dict[str, float]:
    broker, registry = Broker(root / "mosquitto"), Registry(root / "registry")
    broker.start()
    registry.start()
    try:
        with _daemons() as started:
            fleet = RealFleet(root / "fleet", broker, registry)
            fleet.start(_factory(root, started), 3)
            if fleet.rollout(fleet.push(1), "--waves", "100%") != 0:
                raise RuntimeError(f"seeding v1 failed:\n{dump(fleet.reports())}")
            pulled0 = len(registry.blob_gets())
            ref = fleet.push(2)
            bundle = fleet.bundles.root / "probe-2.wgb"
            start = time.perf_counter()
            if fleet.rollout(ref, "--waves", "1,100%") != 0:
                raise RuntimeError(f"rollout of v2 failed:\n{dump(fleet.reports())}")
            rollout_s = time.perf_counter() - start
            layer_gets = registry.blob_gets()[pulled0:]
            other = _factory(root, started)(fleet.member_config("solo", []), "solo")
            _put(other, fleet.bundles.root / "probe-1.wgb")  # as warm as the members: v1 ran
            start = time.perf_counter()
            _put(other, bundle)
            put_s = time.perf_counter() - start
            counter = _Counter(broker)
            try:
                idle = _idle(fleet.daemons[0], other, counter, 3.0 if quick else 60.0)
            finally:
                counter.close()
    finally:
        registry.stop()
        broker.stop()
    pulled = _layer_bytes(layer_gets, bundle) / len(fleet.daemons)
    return {
        "rollout_s": rollout_s,
        "put_s": put_s,
        "size": bundle.stat().st_size,
        "pulled": pulled,
        **idle,
    }


def _layer_bytes(gets: list[str], bundle: Path) -> float:
    """Bytes served of the bundle's layer (its blob digest is the file's SHA-256)."""
    data = bundle.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return float(sum(len(data) for g in gets if g == digest))


def run(quick: bool) -> list[Figure]:
    # the CLI's push lines and rollout tables would land inside the suite's table
    with (
        tempfile.TemporaryDirectory(prefix="wasmgate-bench-fleet-") as tmp,
        redirect_stdout(io.StringIO()),
    ):
        m = _measure(Path(tmp), quick)
    return [
        Figure("fleet", "rollout to 3 daemons, waves 1,100% (s)", m["rollout_s"], "s",
               "PUT /v1/bundles, 1 daemon", m["put_s"]),
        Figure("fleet", "bytes pulled per gateway", m["pulled"], "B", "bundle size", m["size"]),
        Figure("fleet", "idle CPU, fleet member (s/window)", m["member_cpu"], "s",
               "daemon in no group", m["other_cpu"]),
        Figure("fleet", "idle RSS growth, fleet member (MiB)", m["member_rss"], "MiB",
               "daemon in no group", m["other_rss"]),
        Figure("fleet", "MQTT messages/hour, fleet member", m["member_msgs"], "msg/h",
               "daemon in no group", m["other_msgs"]),
    ]  # fmt: skip


if __name__ == "__main__":
    script_main(__doc__, run, "3 s idle window (figures only check that it runs)")

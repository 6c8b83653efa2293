"""The broker sessions of workers a gateway no longer has (``[workers] count`` lowered, or
back to one process), ended at start.

A worker's connection is a persistent session (client id ``<client_id>-w<i>``) in the
gateway's shared subscription, and mosquitto (2.0, measured) hands a shared group's
requests round-robin to its members' sessions whether they are connected or not: a
worker that restarts finds its share waiting, but the session of a worker that will never
come back would take its share of every request until the session expires
(``mqtt.session_expiry_s``), and then drop them. So the gateway records how many worker
sessions it used (``<state_dir>/mqtt-worker-sessions``) and, at its next start with
fewer, connects as each one no longer used with a clean start and no expiry, which ends
it (what the broker had queued for it is dropped with it: requests a device sent while
the gateway was reconfigured, at most a share of one restart's backlog). A broker that
cannot be reached leaves the record as it was: the next start tries again.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wasmgate.runtime.mqtt.paho_adapt import build_client
from wasmgate.runtime.mqtt.topics import worker_settings
from wasmgate.runtime.ops.config import MqttSettings

__all__ = ["FILE_NAME", "end_unused_sessions"]

log = logging.getLogger("wasmgate.mqtt")

FILE_NAME = "mqtt-worker-sessions"
_CONNACK_S = 10.0


def end_unused_sessions(settings: MqttSettings, state_dir: Path, workers: int) -> None:
    """End the sessions of worker indexes ``workers`` and above that a past start used,
    then record ``workers`` (blocking: run it in a thread)."""
    record = state_dir / FILE_NAME
    try:
        used = int(record.read_text().strip() or 0)
    except (OSError, ValueError):
        used = 0
    try:
        for index in range(workers, used):
            _end(worker_settings(settings, index))
    except (OSError, ConnectionError, TimeoutError) as e:
        log.warning("mqtt: the sessions of removed workers not ended (next start): %s", e)
        return
    if used != workers:
        record.write_text(f"{workers}\n")


def _end(settings: MqttSettings) -> None:
    client_id = settings.client_id or ""
    client = build_client(settings, client_id, None, clean=True)
    answered: list[bool] = []
    client.on_connect = lambda *_a: answered.append(True)
    host = settings.host or "localhost"
    if settings.protocol == "5":
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = 0
        rc = client.connect(host, settings.port, 30, clean_start=True, properties=props)
    else:
        rc = client.connect(host, settings.port, 30)
    if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
        raise ConnectionError(f"connect as {client_id}: {paho.error_string(rc)}")
    deadline = time.monotonic() + _CONNACK_S
    while not answered and time.monotonic() < deadline:
        client.loop(0.1)
    client.disconnect()
    if not answered:
        raise TimeoutError(f"no CONNACK for {client_id}")
    log.info("mqtt: ended the session of a removed worker", extra={"client_id": client_id})

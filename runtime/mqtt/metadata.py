"""Retained ``models/<m>/metadata`` and ``adapters/<a>/metadata`` documents.

Model documents use the KServe V2 model-metadata schema (as ``GET /v2/models/{m}``);
adapter documents add how to call the adapter over MQTT; an adapter's topics use its MQTT
name (``routes.mqtt``), which may differ from its HTTP name (the document's ``name``).
A name that disappears (bundle removed) gets an empty retained payload, which deletes the
retained message.
"""

from __future__ import annotations

import logging
from typing import Any

from wasmgate.runtime.mqtt.client import MqttClient
from wasmgate.runtime.mqtt.messages import JSON, Outgoing
from wasmgate.runtime.mqtt.topics import Topics
from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.served.api import ModelInfo, ServiceAPI
from wasmgate.sandbox.models import TensorSpec

log = logging.getLogger("wasmgate.mqtt")


def _tensors(specs: tuple[TensorSpec, ...]) -> list[dict[str, Any]]:
    return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in specs]


def metadata_document(info: ModelInfo, topics: Topics) -> dict[str, Any]:
    """The retained JSON for one model or adapter."""
    doc: dict[str, Any] = {
        "name": info.name,
        "versions": [str(info.version)],
        "platform": info.platform,
        "inputs": _tensors(info.inputs),
        "outputs": _tensors(info.outputs),
        "ready": info.ready,
        "bundle": info.bundle,
    }
    if info.kind == "adapter":
        doc["request_topic"] = f"{topics.root}/adapters/{mqtt_name(info)}/req"
    else:
        doc["request_topic"] = f"{topics.root}/models/{info.name}/infer"
        doc["max_batch_size"] = info.max_batch_size
    return doc


def mqtt_name(info: ModelInfo) -> str:
    """The name of a model or adapter on the topic tree (an adapter's ``routes.mqtt``)."""
    return info.mqtt_name if info.kind == "adapter" and info.mqtt_name else info.name


class MetadataPublisher:
    """Publishes the service's models and adapters; remembers them to clear removed ones."""

    def __init__(self, client: MqttClient, topics: Topics, service: ServiceAPI) -> None:
        self._client = client
        self._topics = topics
        self._service = service
        self._published: set[str] = set()

    def publish(self) -> None:
        if not self._client.connected:
            # Nothing is queued while disconnected: the publish after the next connect
            # sends every document and clears what was removed meanwhile.
            return
        try:
            infos = self._service.list_models()
        except Exception:
            log.exception("cannot list models for MQTT metadata")
            return
        current: set[str] = set()
        for info in infos:
            topic = self._topics.metadata(info.kind, mqtt_name(info))
            body = jsonio.dumps(metadata_document(info, self._topics))
            self._send(Outgoing(topic, body, qos=1, retain=True, content_type=JSON))
            current.add(topic)
        for gone in self._published - current:
            self._send(Outgoing(gone, b"", qos=1, retain=True))
        self._published = current

    def _send(self, msg: Outgoing) -> None:
        fut = self._client.publish(msg)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())

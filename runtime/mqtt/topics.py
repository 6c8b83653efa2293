"""The topic tree of ``docs/mqtt-topics.md``, relative to ``<topic_prefix>/<gateway_id>/``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from paho.mqtt.client import topic_matches_sub

from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.typed import replace

Kind = Literal["adapter", "model"]

# request segment -> answer segment of the 3.1.1 topic pairs
_PAIRS: dict[Kind, tuple[str, str, str]] = {
    "adapter": ("adapters", "req", "res"),
    "model": ("models", "infer", "result"),
}


@dataclass(frozen=True)
class Route:
    """What a request topic addresses."""

    kind: Kind
    name: str
    client: str | None
    """The ``/<client>`` suffix of the MQTT 3.1.1 form, None for the MQTT 5 form."""


def gateway_id(settings: MqttSettings) -> str:
    return settings.resolved_gateway_id()


def worker_settings(settings: MqttSettings, index: int) -> MqttSettings:
    """A data-plane worker's own connection (``[workers] count`` > 1): its client id,
    ``<client_id>-w<index>`` (the broker keeps each worker's session, so a restarted worker
    gets back what it had not acknowledged), and the request topics through a shared
    subscription, ``mqtt.shared_group`` or else ``wasmgate-<gateway_id>``, so the broker
    hands each request to one worker of the gateway."""
    gateway = gateway_id(settings)
    base = settings.client_id or f"wasmgate-{gateway}"
    group = settings.shared_group or f"wasmgate-{gateway}"
    return replace(settings, client_id=f"{base}-w{index}", shared_group=group)


class Topics:
    """Builds and parses the bridge's topics for one gateway."""

    def __init__(self, settings: MqttSettings) -> None:
        self.prefix = settings.topic_prefix.rstrip("/")
        self.root = f"{self.prefix}/{gateway_id(settings)}"
        self._group = settings.shared_group
        self._reply_filters = settings.response_topics

    @property
    def status(self) -> str:
        return f"{self.root}/status"

    @property
    def variables(self) -> str:
        """Operator variables, a retained ``{"<bundle>": {"name": value}}`` document. Never
        through the shared group: every gateway of the group must apply it."""
        return f"{self.root}/variables"

    def subscriptions(self) -> list[str]:
        """Request filters, through ``$share/<group>/`` when a shared group is set."""
        filters = [
            f"{self.root}/adapters/+/req",
            f"{self.root}/adapters/+/req/+",
            f"{self.root}/models/+/infer",
            f"{self.root}/models/+/infer/+",
        ]
        if self._group:
            return [f"$share/{self._group}/{f}" for f in filters]
        return filters

    def parse(self, topic: str) -> Route | None:
        """The route of a request topic, or None when it is not one of ours."""
        if not topic.startswith(self.root + "/"):
            return None
        parts = topic[len(self.root) + 1 :].split("/")
        if len(parts) not in (3, 4) or not all(parts):
            return None
        for kind, (head, req, _) in _PAIRS.items():
            if parts[0] == head and parts[2] == req:
                return Route(kind, parts[1], parts[3] if len(parts) == 4 else None)
        return None

    def paired_reply(self, route: Route) -> str | None:
        """The 3.1.1 answer topic (``.../res/<client>`` or ``.../result/<client>``)."""
        if route.client is None:
            return None
        head, _, res = _PAIRS[route.kind]
        return f"{self.root}/{head}/{route.name}/{res}/{route.client}"

    def reply_refusal(self, topic: str) -> str | None:
        """Why the daemon must not publish a requester's answer to ``topic``, or None.

        Any client may name any Response Topic: without this it could make the daemon
        publish chosen bytes to an actuator's command topic or spoof a gateway's status."""
        if topic == self.prefix or topic.startswith(self.prefix + "/"):
            return f"it is inside the daemon's own tree {self.prefix!r}"
        if topic.startswith("$") or "+" in topic or "#" in topic or "\0" in topic:
            return "it is a system topic or holds a wildcard"
        if not any(topic_matches_sub(f, topic) for f in self._reply_filters):
            return "it matches none of mqtt.response_topics"
        return None

    def events(self, adapter: str) -> str:
        return f"{self.root}/events/{adapter}"

    def samples(self, adapter: str) -> str:
        """Where the hard examples kept for ``adapter`` are shipped (``samples.mqtt_topic``)."""
        return f"{self.root}/samples/{adapter}"

    def deferred(self, adapter: str) -> str:
        """Where the answers of deferred cloud fallbacks of ``adapter`` are published."""
        return f"{self.root}/deferred/{adapter}"

    def metadata(self, kind: Kind, name: str) -> str:
        head = _PAIRS[kind][0]
        return f"{self.root}/{head}/{name}/metadata"

"""`BridgeState`: what the MQTT bridge counts, for ``/metrics`` and the status page."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from wasmgate.runtime.mqtt.connection import ClientState


@dataclass
class BridgeState:
    """Counters and connection facts for ``/metrics`` and the status page."""

    client: ClientState
    gateway: str
    received: int = 0
    answered: int = 0
    errors: int = 0
    duplicates: int = 0
    redelivered: int = 0
    """Requests the broker marked as redelivered (DUP) that were worked, not deduplicated: a
    restarted daemon cannot know it answered them before it died."""
    expired: int = 0
    in_flight: int = 0
    busy_retries: int = 0
    retained_ignored: int = 0
    """Retained requests (replayed by the broker at every subscribe) ignored, unanswered."""
    replies_refused: int = 0
    """Requests dropped because their Response Topic is refused (see mqtt.response_topics)."""
    oversize_refused: int = 0
    """Requests ignored because their Response Topic or Correlation Data is longer than
    mqtt.max_response_topic_bytes / mqtt.max_correlation_bytes."""
    stored: int = 0
    """Answers kept in the store because the broker was away (drained when it is back)."""
    by_status: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

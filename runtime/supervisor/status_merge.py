"""``/v1/status`` of the whole gateway: the supervisor's document (its registry, its
components, its history) with the traffic the workers served added in.

Per model row, the request and error counts and the per-source counts are summed over the
processes; the latency figures are the busiest process's (percentiles do not add up). The
recent failures are merged by time, the newest 50 kept; their total is summed. The MQTT
card is the supervisor's connection (the gateway's status, metadata, fleet) with the
requests the workers' connections served summed in, and each worker's connection listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["merge_status"]

_RECENT = 50
_LATENCY = ("p50_ms", "p99_ms", "last_ms")
_MQTT_COUNTS = (
    "received", "answered", "errors", "duplicates", "redelivered", "expired", "in_flight",
    "busy_retries", "retained_ignored", "replies_refused", "oversize_refused", "stored",
)  # fmt: skip


def merge_status(own: dict[str, Any], workers: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``own`` with ``workers``' traffic added (``own`` is changed and returned)."""
    rows = {(r["kind"], r["name"]): r for r in own.get("models", [])}
    busiest = {key: int(r.get("requests") or 0) for key, r in rows.items()}
    errors = own.get("errors") or {"total": 0, "recent": []}
    mqtt = (own.get("components") or {}).get("mqtt")
    for doc in workers:
        theirs_mqtt = (doc.get("components") or {}).get("mqtt")
        if isinstance(mqtt, dict) and isinstance(theirs_mqtt, dict):
            _add_mqtt(mqtt, theirs_mqtt)
        for row in doc.get("models", []):
            key = (row["kind"], row["name"])
            if key in rows:
                _add_row(rows[key], row, busiest)
        theirs = doc.get("errors") or {}
        errors["total"] = int(errors.get("total", 0)) + int(theirs.get("total", 0))
        errors["recent"] = [*errors.get("recent", []), *theirs.get("recent", [])]
    errors["recent"] = sorted(errors["recent"], key=lambda f: float(f.get("at", 0)))[-_RECENT:]
    own["errors"] = errors
    return own


def _add_row(mine: dict[str, Any], theirs: dict[str, Any], busiest: dict[Any, int]) -> None:
    key = (mine["kind"], mine["name"])
    requests = int(theirs.get("requests") or 0)
    if requests > busiest[key]:
        busiest[key] = requests
        for field in _LATENCY:
            mine[field] = theirs.get(field)
    for field in ("requests", "errors", "adapter_calls"):
        if mine.get(field) is not None and theirs.get(field) is not None:
            mine[field] = int(mine[field]) + int(theirs[field])
    sources = dict(mine.get("sources") or {})
    for source, count in (theirs.get("sources") or {}).items():
        sources[source] = int(sources.get(source, 0)) + int(count)
    mine["sources"] = sources


def _add_mqtt(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    for field in _MQTT_COUNTS:
        mine[field] = int(mine.get(field) or 0) + int(theirs.get(field) or 0)
    by_status = dict(mine.get("by_status") or {})
    for code, count in (theirs.get("by_status") or {}).items():
        by_status[code] = int(by_status.get(code, 0)) + int(count)
    mine["by_status"] = by_status
    client = theirs.get("client") or {}
    mine.setdefault("workers", []).append(
        {"connected": bool(client.get("connected")), "received": theirs.get("received", 0)}
    )

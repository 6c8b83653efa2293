"""``/v1/status`` of the whole gateway: the supervisor's document (its registry, its
components, its history) with the traffic the workers served added in.

Per model row, the request and error counts and the per-source counts are summed over the
processes; the latency figures are the busiest process's (percentiles do not add up). The
recent failures are merged by time, the newest 50 kept; their total is summed. The MQTT
card is the supervisor's connection (the gateway's status, metadata, fleet) with the
requests the workers' connections served summed in, and each worker's connection listed.
The cloud card sums the processes' cloud traffic and shows the most open breaker (they
share one state, `wasmgate.runtime.cloud.breaker_shared`; a process reads it when asked),
every worker's beside it; ``attention`` is judged again on the merged components.
The traffic chart (``history``) adds the workers' points to the supervisor's, the newest
with the newest (every process samples every ``interval_s``; their clocks differ by less
than one interval): request rates and queues summed, error and fallback percentages
weighted by each process's rate, latencies and batch sizes the busiest process's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from wasmgate.runtime.http.attention import attention

__all__ = ["merge_status"]

_RECENT = 50
_LATENCY = ("p50_ms", "p99_ms", "last_ms")
_OPENNESS = {"closed": 0, "half_open": 1, "open": 2}
_SERIES = ("rps", "p50_ms", "p99_ms", "error_pct", "fallback_pct", "batch", "queue")
_MQTT_COUNTS = (
    "received", "answered", "errors", "duplicates", "redelivered", "expired", "in_flight",
    "busy_retries", "retained_ignored", "replies_refused", "oversize_refused", "stored",
)  # fmt: skip


def merge_status(own: dict[str, Any], workers: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``own`` with ``workers``' traffic added (``own`` is changed and returned)."""
    rows = {(r["kind"], r["name"]): r for r in own.get("models", [])}
    busiest = {key: int(r.get("requests") or 0) for key, r in rows.items()}
    errors = own.get("errors") or {"total": 0, "recent": []}
    components = own.get("components") or {}
    for doc in workers:
        for name, add in (("mqtt", _add_mqtt), ("cloud", _add_cloud), ("samples", _add_samples)):
            mine, theirs_card = components.get(name), (doc.get("components") or {}).get(name)
            if isinstance(mine, dict) and isinstance(theirs_card, dict):
                add(mine, theirs_card)
        for row in doc.get("models", []):
            key = (row["kind"], row["name"])
            if key in rows:
                _add_row(rows[key], row, busiest)
        theirs = doc.get("errors") or {}
        errors["total"] = int(errors.get("total", 0)) + int(theirs.get("total", 0))
        errors["recent"] = [*errors.get("recent", []), *theirs.get("recent", [])]
    errors["recent"] = sorted(errors["recent"], key=lambda f: float(f.get("at", 0)))[-_RECENT:]
    own["errors"] = errors
    if components:
        own["attention"] = attention(components)
    if isinstance(own.get("history"), dict):
        own["history"] = merge_history(own["history"], [d.get("history") for d in workers])
    return own


def merge_history(own: dict[str, Any], workers: Iterable[Any]) -> dict[str, Any]:
    """``own`` chart with every worker's added in, point by point from the newest."""
    size = len(own.get("t") or [])
    by_name: dict[str, list[dict[str, Any]]] = {}
    for doc in (own, *workers):
        if isinstance(doc, dict):
            for name, one in (doc.get("series") or {}).items():
                by_name.setdefault(name, []).append(one)
    own["series"] = {name: _merged(every, size) for name, every in by_name.items()}
    return own


def _merged(every: list[dict[str, Any]], size: int) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": next((s["kind"] for s in every if s.get("kind")), "")}
    points = [_point([_at(s, i - size) for s in every]) for i in range(size)]
    for field in _SERIES:
        out[field] = [p[field] for p in points]
    return out


def _at(series: dict[str, Any], i: int) -> dict[str, Any]:
    """Point ``i`` (negative: from the newest) of one process's series; {} before its start."""
    if -i > len(series.get("rps") or []):
        return {}
    return {field: series[field][i] for field in _SERIES}


def _point(points: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [p.get("rps") or 0.0 for p in points]
    total = sum(rates)
    busiest = points[rates.index(max(rates))] if points else {}
    queues = [p["queue"] for p in points if p.get("queue") is not None]
    out = {field: busiest.get(field) for field in ("p50_ms", "p99_ms", "batch")}
    out["rps"] = round(total, 3) if any("rps" in p for p in points) else None
    out["queue"] = sum(queues) if queues else None
    for field in ("error_pct", "fallback_pct"):
        shares = [
            (p[field], r) for p, r in zip(points, rates, strict=True) if p.get(field) is not None
        ]
        weight = sum(r for _, r in shares)
        out[field] = round(sum(v * r for v, r in shares) / weight, 2) if weight > 0 else None
    return out


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


def _add_cloud(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    for field in ("requests", "failures", "in_flight"):
        mine[field] = int(mine.get(field) or 0) + int(theirs.get(field) or 0)
    if float(theirs.get("last_error_at") or 0) > float(mine.get("last_error_at") or 0):
        mine["last_error"], mine["last_error_at"] = theirs["last_error"], theirs["last_error_at"]
    breaker, their_breaker = mine.get("breaker") or {}, theirs.get("breaker") or {}
    mine.setdefault("workers", []).append({"breaker": their_breaker.get("state")})
    if _openness(their_breaker) > _openness(breaker):
        mine["breaker"] = {**their_breaker, "opens": breaker.get("opens", 0)}
    for field in ("opens", "rejected"):
        mine["breaker"][field] = int(breaker.get(field) or 0) + int(their_breaker.get(field) or 0)


def _add_samples(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    mine["kept"] = int(mine.get("kept") or 0) + int(theirs.get("kept") or 0)
    skipped = dict(mine.get("skipped") or {})
    for reason, count in (theirs.get("skipped") or {}).items():
        skipped[reason] = int(skipped.get(reason, 0)) + int(count)
    mine["skipped"] = skipped


def _openness(breaker: dict[str, Any]) -> int:
    return _OPENNESS.get(str(breaker.get("state")), 0)


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

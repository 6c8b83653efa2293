"""The counts of ``/v1/status`` that outlive the workers which made them.

`merge_status` adds up what the processes running now have counted since they started:
requests, errors and sources per model row, the MQTT card's counters, the cloud card's
traffic, the samples kept and skipped, the failures' total. A worker replaced by a roll or
a crash took its share with it, so the page's counts went back at every install. Here
the counts of ended workers are kept (`StatusCounts`), from the final status document a
stopping worker hands over or, for one killed outright, the last one read from it, and
added to the merged document. Gauges (in flight, a breaker's state, latencies) are what
the running processes say.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COUNTED_MQTT", "StatusCounts", "add_counts", "counts_of"]

COUNTED_MQTT = (
    "received", "answered", "errors", "duplicates", "redelivered", "expired",
    "busy_retries", "retained_ignored", "replies_refused", "oversize_refused", "stored",
)  # fmt: skip
"""The MQTT card's counters (its ``in_flight`` is a gauge)."""
_ROW = ("requests", "errors", "adapter_calls")
Counts = dict[str, Any]


class StatusCounts:
    """The last status document of each running worker, and the ended ones' counts."""

    def __init__(self) -> None:
        self._last: dict[int, Counts] = {}
        self._final: set[int] = set()
        self.retired: Counts = {}

    def seen(self, pid: int, doc: dict[str, Any]) -> None:
        if pid not in self._final:
            self._last[pid] = counts_of(doc)

    def final(self, pid: int, doc: dict[str, Any]) -> None:
        self._last[pid] = counts_of(doc)
        self._final.add(pid)

    def ended(self, pid: int) -> None:
        self._final.discard(pid)
        done = self._last.pop(pid, None)
        if done is not None:
            self.retired = _sum(self.retired, done)

    def gone(self, running: set[int]) -> Counts:
        """The retired counts, with those of workers that stopped serving (a roll
        replaced them) but have not ended yet."""
        total = self.retired
        for pid, counts in self._last.items():
            if pid not in running:
                total = _sum(total, counts)
        return total


def counts_of(doc: dict[str, Any]) -> Counts:
    """The counters of one process's status document, in a shape of their own."""
    components = doc.get("components") or {}
    rows = {
        f"{r['kind']}/{r['name']}": {
            **{f: int(r.get(f) or 0) for f in _ROW},
            "sources": {k: int(v) for k, v in (r.get("sources") or {}).items()},
        }
        for r in doc.get("models", [])
    }
    mqtt, cloud, samples = (_card(components, name) for name in ("mqtt", "cloud", "samples"))
    breaker = cloud.get("breaker") or {}
    return {
        "rows": rows,
        "errors": int((doc.get("errors") or {}).get("total", 0)),
        "mqtt": {
            **{f: int(mqtt.get(f) or 0) for f in COUNTED_MQTT},
            "by_status": {k: int(v) for k, v in (mqtt.get("by_status") or {}).items()},
        },
        "cloud": {
            "requests": int(cloud.get("requests") or 0),
            "failures": int(cloud.get("failures") or 0),
            "opens": int(breaker.get("opens") or 0),
            "rejected": int(breaker.get("rejected") or 0),
        },
        "samples": {
            "kept": int(samples.get("kept") or 0),
            "skipped": {k: int(v) for k, v in (samples.get("skipped") or {}).items()},
        },
    }


def _card(components: dict[str, Any], name: str) -> dict[str, Any]:
    card = components.get(name)
    return card if isinstance(card, dict) else {}


def _sum(a: Counts, b: Counts) -> Counts:
    """``a`` + ``b``, key by key, nested dicts included."""
    out = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        out[key] = _sum(mine or {}, value) if isinstance(value, dict) else (mine or 0) + value
    return out


def add_counts(doc: dict[str, Any], counts: Counts) -> None:
    """Add ``counts`` into a merged status document (rows and cards it shows)."""
    _add_rows(doc, counts)
    _add_cards(doc, counts)


def _add_rows(doc: dict[str, Any], counts: Counts) -> None:
    for row in doc.get("models", []):
        extra = counts.get("rows", {}).get(f"{row['kind']}/{row['name']}")
        if extra:
            for f in _ROW:
                if row.get(f) is not None:
                    row[f] = int(row[f]) + extra[f]
            row["sources"] = _sum(row.get("sources") or {}, extra["sources"])
    errors = doc.get("errors")
    if isinstance(errors, dict):
        errors["total"] = int(errors.get("total", 0)) + counts.get("errors", 0)


def _add_cards(doc: dict[str, Any], counts: Counts) -> None:
    components = doc.get("components") or {}
    for name in ("mqtt", "samples"):
        card = components.get(name)
        if isinstance(card, dict) and name in counts:
            card.update(_sum(card, counts[name]))
    cloud = components.get("cloud")
    if isinstance(cloud, dict) and "cloud" in counts:
        extra = counts["cloud"]
        for f in ("requests", "failures"):
            cloud[f] = int(cloud.get(f) or 0) + extra[f]
        breaker = cloud.setdefault("breaker", {})
        for f in ("opens", "rejected"):
            breaker[f] = int(breaker.get(f) or 0) + extra[f]

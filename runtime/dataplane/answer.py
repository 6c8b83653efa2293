"""How an answer describes itself, on every transport: HTTP headers, gRPC trailing metadata
(lower-cased) and, for MQTT, user properties carry the same facts."""

from __future__ import annotations

from collections.abc import Mapping

from wasmgate.runtime.served.api import Source

SOURCE_HEADER = "X-Wasmgate-Source"
VERSION_HEADER = "X-Wasmgate-Version"
FALLBACK_HEADER = "X-Wasmgate-Fallback-Reason"


def answer_headers(
    source: Source,
    version: int,
    timings: Mapping[str, float],
    total: float,
    fallback_reason: str | None = None,
) -> dict[str, str]:
    """Source, version and a ``Server-Timing`` latency breakdown (milliseconds)."""
    parts = [f"{stage};dur={seconds * 1e3:.3f}" for stage, seconds in timings.items()]
    parts.append(f"total;dur={total * 1e3:.3f}")
    headers = {
        SOURCE_HEADER: source,
        VERSION_HEADER: str(version),
        "Server-Timing": ", ".join(parts),
    }
    if fallback_reason:
        headers[FALLBACK_HEADER] = fallback_reason.replace("\r", " ").replace("\n", " ")
    return headers

"""What needs an operator's attention while the daemon is ready: ``/v1/status`` ``attention``.

Readiness (``/v2/health/ready``) means the local data plane answers: the start-up bundles
are loaded and every listener and stage-two part (gRPC, the fleet member, the MQTT bridge)
has started. It does not wait for the MQTT broker, nor fail when the broker goes away: a
broker outage must not take the HTTP and gRPC answers of a gateway out of its load
balancer's rotation or make systemd restart a daemon that cannot fix the broker (the
bridge reconnects by itself and keeps undelivered answers in the store). What is wrong
while ready is listed here instead, read from the component sections the page shows, so
the status page's header and a monitoring script read the same list:

- ``mqtt``: the broker link is down (or was never up), with the broker and the last error;
- ``bundles``: bundle files refused (their names);
- ``fleet``: the last fleet document failed to apply, or was refused;
- ``cloud``: the cloud fallback's breaker is open;
- ``workers``: a data-plane worker keeps crashing (it waits longer before each start), or
  a process outside the gateway listens on one of its ports (``shared_ports``: it takes a
  share of the connections, `wasmgate.runtime.supervisor.ports`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _mqtt(section: Mapping[str, Any]) -> str | None:
    client = section.get("client") or {}
    if "connected" not in client or client["connected"]:
        return None
    state = "disconnected" if client.get("connects") else "never connected"
    error = client.get("last_error")
    return f"MQTT {state} ({section.get('broker', '?')})" + (f": {error}" if error else "")


def _bundles(section: Mapping[str, Any]) -> str | None:
    failures = section.get("failures") or []
    if not failures:
        return None
    names = ", ".join(str(f.get("name") or f.get("source")) for f in failures[:5])
    more = f" and {len(failures) - 5} more" if len(failures) > 5 else ""
    files = "file" if len(failures) == 1 else "files"
    return f"{len(failures)} bundle {files} refused: {names}{more}"


def _fleet(section: Mapping[str, Any]) -> str | None:
    if section.get("state") == "failed":
        return f"fleet document {section.get('serial')} failed: {section.get('reason')}"
    failure = section.get("last_failure")
    if failure:
        return f"fleet document {failure.get('serial')} failed, rolled back: {failure.get('error')}"
    return None


def _cloud(section: Mapping[str, Any]) -> str | None:
    state = (section.get("breaker") or {}).get("state")
    return f"cloud fallback breaker {state}" if state not in (None, "closed") else None


def _workers(section: Mapping[str, Any]) -> str | None:
    shared = section.get("shared_ports") or []
    found = []
    if shared:
        ports = ", ".join(str(p) for p in shared)
        found.append(f"port {ports} also listened on outside the gateway (it takes a share "
                     "of the connections)")  # fmt: skip
    crashing = [w for w in section.get("workers") or [] if w.get("state") == "crashing"]
    if crashing:
        worst = max(crashing, key=lambda w: int(w.get("restarts") or 0))
        which = ", ".join(str(w.get("index")) for w in crashing)
        found.append(
            f"worker {which} crashing: restarted {worst.get('restarts')} times, "
            f"last exit {worst.get('last_exit') or '?'}"
        )
    return "; ".join(found) or None


_CHECKS = {
    "mqtt": _mqtt,
    "bundles": _bundles,
    "fleet": _fleet,
    "cloud": _cloud,
    "workers": _workers,
}


def attention(components: Mapping[str, Any]) -> list[dict[str, str]]:
    """``[{"what": "mqtt", "message": "MQTT disconnected (…)"}, …]``: empty when all is well."""
    found = []
    for what, check in _CHECKS.items():
        section = components.get(what)
        if not isinstance(section, Mapping) or ("error" in section and len(section) == 1):
            continue
        message = check(section)
        if message is not None:
            found.append({"what": what, "message": message})
    return found

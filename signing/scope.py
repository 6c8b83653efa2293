"""Signer scope: every name a bundle makes reachable must match one of its signer's patterns.

A bundle is reachable under more names than its ``name``: its adapter's HTTP route
(``/v1/adapters/<routes.http>``, also the V2 model name of the adapter), its MQTT route
(``routes.mqtt``), and each declared model (``/v2/models/<model>``, MQTT
``models/<model>/infer``). MQTT adapter requests and the adapter's event topic
(``events/<adapter>``) are named by the adapter route. A signer trusted for ``acme-*`` must
not be able to claim ``victim`` through any of them, so :func:`check_scope` checks them
all; it is the one place that decides scope, used by every path that authenticates a
manifest (verify, install, start-up, trust reload).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from wasmgate.signing.errors import KeyScopeError
from wasmgate.signing.manifest import Manifest


def claimed_names(manifest: Manifest) -> list[tuple[str, str]]:
    """Every (field, name) the manifest claims, ``name`` first; routes default to the name."""
    routes = manifest.routes
    claims = [
        ("name", manifest.name),
        ("routes.http", routes.http or manifest.name),
        ("routes.mqtt", routes.mqtt or manifest.name),
    ]
    if manifest.adapter is not None:
        # The adapter's event topic is events/<adapter route>: named for completeness, so
        # an error says which reachable name is out of scope.
        claims.append(("event topic", routes.http or manifest.name))
    claims += [(f"models[{i}].name", m.name) for i, m in enumerate(manifest.models)]
    return claims


def matches(name: str, patterns: Sequence[str]) -> bool:
    """True if ``name`` matches one of ``patterns`` (fnmatch, case-sensitive).

    The one matching rule of every name scope: bundle signers here, the fleet role's
    ``names`` in ``fleetdoc.py``.
    """
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def listed(patterns: Sequence[str]) -> str:
    """Patterns as an operator reads them in an error: ``acme-*, digits`` (not a list repr)."""
    return ", ".join(patterns) if patterns else "(none)"


def check_scope(manifest: Manifest, key_id: str, patterns: Sequence[str]) -> None:
    """Raise :class:`KeyScopeError` naming the first claimed name no pattern matches."""
    for field, name in claimed_names(manifest):
        if not matches(name, patterns):
            raise KeyScopeError(
                manifest.label(),
                f"key {key_id} may sign only names matching {listed(patterns)}, "
                f"not {field} {name!r}",
            )

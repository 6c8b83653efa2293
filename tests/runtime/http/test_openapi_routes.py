"""The OpenAPI document describes exactly the routes the daemon's app registers."""

from __future__ import annotations

import json

from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.http.openapi import document
from wasmgate.runtime.ops.config import Settings

METHODS = {"get", "put", "post", "delete", "patch"}
# The status page's assets are files of the page at "/", not part of the API.
UNDOCUMENTED_PREFIXES = ("/static/",)


def _routed() -> set[tuple[str, str]]:
    app = build_app(Settings())
    found = set()
    for route in app.router.routes():
        method, path = route.method.lower(), route.resource.canonical if route.resource else ""
        if method in ("head", "*") or path.startswith(UNDOCUMENTED_PREFIXES):
            continue  # aiohttp adds HEAD to every GET route; "*" is the edge's catch-all
        found.add((method, path))
    return found


def _documented() -> set[tuple[str, str]]:
    paths = json.loads(document())["paths"]
    return {(method, path) for path, ops in paths.items() for method in ops if method in METHODS}


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    routed, documented = _routed(), _documented()
    assert sorted(routed - documented) == [], "routes missing from runtime/http/openapi.json"
    assert sorted(documented - routed) == [], "documented operations the app does not serve"
    assert len(routed) > 20  # the whole API was built, not an empty app

"""Helpers for the staged-release tests: a daemon subprocess with the management API on, and
requests with a canary key or a pinned version."""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.fixtures.daemon import Daemon
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name

TOKEN = "release-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def start(factory: Callable[..., Daemon], kit: BundleKit, tmp: Path, **sections: Any) -> Daemon:
    """A daemon trusting ``kit``'s key, management API on (``TOKEN``)."""
    config = {
        "paths": {"trust_file": kit.save_trust(tmp / "trust.json")},
        "http": {"management_token": TOKEN},
        "profile": host_profile_name(),
        **sections,
    }
    return factory(config=config, name="d")


def call(
    daemon: Daemon,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body); HTTP errors are answers too."""
    req = urllib.request.Request(
        f"{daemon.url}{path}", data=body, method=method, headers=dict(headers or {})
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def manage(
    daemon: Daemon, method: str, path: str, body: bytes | None = None, **query: Any
) -> tuple[int, Any]:
    """A management call; (status, JSON answer)."""
    qs = f"?{urllib.parse.urlencode(query)}" if query else ""
    status, _, out = call(daemon, method, f"{path}{qs}", body, AUTH)
    return status, json.loads(out)


def put(daemon: Daemon, bundle: Path, **query: Any) -> tuple[int, Any]:
    """Upload ``bundle``; ``stage=P`` and gate parameters go to the query."""
    return manage(daemon, "PUT", "/v1/bundles", bundle.read_bytes(), **query)


def entry(daemon: Daemon, name: str = "probe") -> dict[str, Any]:
    """The ``/v1/bundles`` entry of ``name``."""
    listing = manage(daemon, "GET", "/v1/bundles")[1]
    (found,) = [b for b in listing["bundles"] if b["name"] == name]
    return dict(found)


def ask(
    daemon: Daemon, key: str | None = None, version: str | None = None, payload: bytes = b"Px"
) -> tuple[int, str | None, bytes]:
    """(status, answering version, body) of one adapter request."""
    headers = {}
    if key is not None:
        headers["X-Wasmgate-Canary-Key"] = key
    if version is not None:
        headers["X-Wasmgate-Version"] = version
    status, got, body = call(daemon, "POST", "/v1/adapters/probe", payload, headers)
    return status, got.get("X-Wasmgate-Version"), body


def sides(daemon: Daemon, keys: Iterable[str]) -> dict[str, str]:
    """Key -> the version that answered it."""
    out = {}
    for key in keys:
        status, version, body = ask(daemon, key)
        assert status == 200, body
        assert version is not None
        out[key] = version
    return out


def until_decided(daemon: Daemon, limit_s: float = 90.0) -> dict[str, Any]:
    """Send keyed requests until the gates decided (no candidate left); the bundle entry."""
    deadline = time.monotonic() + limit_s
    for i in itertools.count():
        ask(daemon, f"k{i}")
        if i % 10 == 9:
            found = entry(daemon)
            if "staged" not in found:
                return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no gate decision after {limit_s}s: {entry(daemon)}")
    raise AssertionError("unreachable")


def metric(daemon: Daemon, line_start: str) -> float | None:
    """The value of the first ``/metrics`` line starting with ``line_start``."""
    text = call(daemon, "GET", "/metrics")[2].decode()
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None

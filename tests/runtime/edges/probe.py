"""A real daemon serving the ``probe`` test bundle, and plain-socket HTTP helpers for attacks.

`urllib` hides what an attacker controls (raw header values, half-sent requests), so these
helpers speak HTTP/1.1 over sockets; every socket has a timeout (bounded waits).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.daemon import Daemon
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name


def probe_daemon(
    tmp_path: Path,
    daemon_factory: Callable[..., Daemon],
    config: Mapping[str, Any] | None = None,
    limits: Mapping[str, Any] | None = None,
    name: str = "d",
    *,
    sections: Mapping[str, Any] | None = None,
) -> Daemon:
    """Start ``wasmgate serve`` with the probe bundle (adapter ``probe``, model ``double``);
    ``sections``: more manifest tables (``fallback``, ...)."""
    kit = BundleKit(tmp_path / f"kit-{name}")
    bundles = tmp_path / name / "data" / "bundles"
    bundles.mkdir(parents=True)
    sections = {**(sections or {}), **({"limits": dict(limits)} if limits else {})} or None
    kit.build("probe", 1, out_dir=bundles, sections=sections)
    merged: dict[str, Any] = {
        "paths": {"trust_file": kit.save_trust(tmp_path / f"trust-{name}.json")},
        "profile": host_profile_name(),
    }
    merged.update(config or {})
    return daemon_factory(config=merged, name=name)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    *,
    source: str = "127.0.0.1",
    timeout: float = 30.0,
) -> Answer:
    """One HTTP/1.1 request on a fresh connection from ``source`` (any 127.0.0.0/8 address)."""
    head = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close"}
    head.update(headers or {})
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout, (source, 0)) as sock:
        sock.sendall("\r\n".join(lines).encode("latin-1") + body)
        data = _read_all(sock)
    return _parse(data)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(data: bytes) -> Answer:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), headers, body)

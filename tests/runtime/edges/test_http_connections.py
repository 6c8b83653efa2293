"""Slowloris, trickled bodies, oversize JSON, DNS rebinding and cross-site POSTs against a
real daemon: each attack is bounded and another client keeps being served meanwhile.

Loopback is a whole /8 on Linux, so attacker and client use different source addresses
(127.0.0.1 vs 127.0.0.2) and the per-peer cap can tell them apart.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tests.fixtures.daemon import Daemon
from tests.fixtures.waits import until
from tests.runtime.edges.probe import probe_daemon, request

CLIENT = "127.0.0.2"
PARTIAL = b"POST /v1/adapters/probe HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def _half_open(port: int, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), 10, (source, 0))
    with contextlib.suppress(OSError):  # the guard may have refused it already
        sock.sendall(PARTIAL)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        sock.recv(65536)  # b"" (closed) or a 503/408 answer before the close
    except OSError:
        pass
    return True


def _still_open(socks: list[socket.socket]) -> int:
    return sum(1 for s in socks if s.fileno() >= 0 and not _closed_by_server(s))


def _served(daemon: Daemon, tag: bytes = b"ok") -> None:
    got = request(daemon.port, "POST", "/v1/adapters/probe", b"P" + tag, source=CLIENT)
    assert (got.status, got.body) == (200, b"v1:" + tag), got


@contextlib.contextmanager
def _sockets() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def _wait_until(check: Callable[[], bool], what: str, limit_s: float = 30.0) -> None:
    until(check, what, limit_s, every_s=0.1)


def test_slowloris_from_one_and_many_peers_leaves_room_for_others(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    http = {"max_connections": 32, "max_connections_per_peer": 16, "header_timeout_s": 600}
    daemon = probe_daemon(tmp_path, daemon_factory, {"http": http})
    with _sockets() as one_peer, _sockets() as many_peers:
        for round_ in range(3):
            one_peer.extend(_half_open(daemon.port, "127.0.0.1") for _ in range(100))
            _served(daemon, b"round%d" % round_)
        # The per-peer cap: the attacker keeps at most its 16 newest connections.
        _wait_until(lambda: _still_open(one_peer) <= 16, "per-peer cap not enforced")
        for i in range(300):
            many_peers.append(_half_open(daemon.port, f"127.0.1.{i % 30 + 1}"))
            if i % 100 == 99:
                _served(daemon, b"many%d" % i)
        # The total cap: 32 at most, whoever holds them.
        _wait_until(
            lambda: _still_open(one_peer) + _still_open(many_peers) <= 32, "total cap not enforced"
        )
        _served(daemon, b"after")
    assert "Traceback" not in daemon.log()


def test_headers_and_bodies_must_arrive_in_time(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    http = {"header_timeout_s": 1, "body_timeout_s": 1}
    daemon = probe_daemon(tmp_path, daemon_factory, {"http": http})
    with _sockets() as socks:
        socks.append(_half_open(daemon.port, "127.0.0.1"))
        trickle = socket.create_connection(("127.0.0.1", daemon.port), 10)
        socks.append(trickle)
        trickle.sendall(
            b"POST /v1/adapters/probe HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: 1000\r\n\r\nPfirst-bytes"
        )
        _served(daemon)
        _wait_until(lambda: _still_open(socks[:1]) == 0, "half-sent headers kept open")
        trickle.settimeout(30)
        assert trickle.recv(65536).startswith(b"HTTP/1.1 408"), "trickled body not refused"
    _served(daemon)


def _double_binary(rows: int) -> tuple[bytes, dict[str, str]]:
    x = np.ones((rows, 4), dtype=np.float32).tobytes()
    entry = {"name": "x", "datatype": "FP32", "shape": [rows, 4]}
    head = json.dumps({"inputs": [{**entry, "parameters": {"binary_data_size": len(x)}}]})
    return head.encode() + x, {"Inference-Header-Content-Length": str(len(head))}


def test_json_bound_hosts_and_cross_site_posts(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    http = {"max_json_bytes": 2000, "allowed_hosts": ["gateway.test"]}
    daemon = probe_daemon(tmp_path, daemon_factory, {"http": http})
    port, path = daemon.port, "/v2/models/double/infer"
    rows = [[1.0, 2.0, 3.0, 4.0]] * 100
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [100, 4], "data": rows}]}
    too_big = request(port, "POST", path, json.dumps(doc).encode())
    assert too_big.status == 413, too_big
    assert "http.max_json_bytes" in too_big.json()["error"]
    body, headers = _double_binary(1000)  # 16 KB of tensor, far over the JSON bound: fine
    assert request(port, "POST", path, body, headers).status == 200

    probe = "/v1/adapters/probe"
    for host, status in [
        ("evil.example", 403),
        (f"evil.example:{port}", 403),
        (f"localhost:{port}", 200),
        ("127.0.0.1", 200),
        (f"[::1]:{port}", 200),
        (f"gateway.test:{port}", 200),
        ("GATEWAY.TEST.", 200),
    ]:
        got = request(port, "POST", probe, b"Phi", {"Host": host})
        assert got.status == status, (host, got)
        assert request(port, "GET", "/metrics", headers={"Host": host}).status == status

    same = f"http://127.0.0.1:{port}"
    for headers, status in [
        ({"Origin": "http://evil.example", "Content-Type": "text/plain"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": "http://[::1"}, 403),
        ({"Origin": "http://x:99999"}, 403),
        ({"Origin": f"http://127.0.0.1:{port + 1}"}, 403),
        ({"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, 403),
        ({"Origin": same, "Sec-Fetch-Site": "same-origin"}, 200),
        ({"Content-Type": "text/plain"}, 200),  # curl, devices: no browser headers
    ]:
        got = request(port, "POST", probe, b"Pcross", headers)
        assert got.status == status, (headers, got)
    assert request(port, "GET", "/v1/status", headers={"Origin": "http://x.example"}).status == 200
    _served(daemon)

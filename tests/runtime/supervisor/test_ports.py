"""The supervisor's hold on the gRPC port (`wasmgate.runtime.supervisor.ports`), with real
sockets: what it refuses, what it lets its workers do, whom it names."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import GrpcSettings, HttpSettings, Settings
from wasmgate.runtime.supervisor.ports import GatewayPorts, listening_inodes


def _ports(port: int | None) -> GatewayPorts:
    settings = Settings(http=HttpSettings(host="127.0.0.1"), grpc=GrpcSettings(port=port))
    return GatewayPorts(settings, 0)


@pytest.fixture
def held() -> Iterator[GatewayPorts]:
    ports = _ports(0)
    ports.reserve_grpc()
    try:
        yield ports
    finally:
        ports.close()


def _bind(port: int, *options: int) -> socket.socket:
    sock = socket.socket()
    try:
        for option in options:
            sock.setsockopt(socket.SOL_SOCKET, option, 1)
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def test_port_zero_is_chosen_once_and_given_to_the_workers(held: GatewayPorts) -> None:
    assert held.grpc_port
    assert held.grpc_status(2)["port"] == held.grpc_port
    assert _ports(None).reserve_grpc().grpc.port is None  # no gRPC: nothing held


def test_the_held_port_refuses_every_bind_but_the_workers(held: GatewayPorts) -> None:
    port = held.grpc_port
    assert port is not None
    for options in ((), (socket.SO_REUSEADDR,)):  # plain, and as most servers bind
        with pytest.raises(OSError, match="Address already in use"):
            _bind(port, *options).close()
    # A worker's gRPC server binds with SO_REUSEPORT, as the supervisor holds it: it may.
    worker = _bind(port, socket.SO_REUSEPORT)
    worker.listen()
    try:
        assert len(listening_inodes(port)) == 1  # the held socket never listens
        assert held.outside() == []  # this process is the gateway here
    finally:
        worker.close()


def test_a_taken_port_is_a_clear_start_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port} for gRPC: "
                                               "address already in use"):  # fmt: skip
            _ports(port).reserve_grpc()


def test_a_listener_outside_the_gateway_is_named(held: GatewayPorts) -> None:
    port = held.grpc_port
    code = (
        "import os, socket, time; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); print(os.getpid(), flush=True); "
        "time.sleep(120)"
    )
    # Not a child of this process (a child counts as the gateway's): a grandchild, orphaned
    # once its parent has started it.
    script = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {code!r}])"
    outer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert outer.stdout is not None
    pid = int(outer.stdout.readline())  # the grandchild's, once it listens
    outer.wait()
    outer.stdout.close()
    try:
        assert held.outside() == [port]
        with pytest.raises(ConfigError, match=f"port {port} is also listened on"):
            held.check()
    finally:
        os.kill(pid, signal.SIGKILL)

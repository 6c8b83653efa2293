"""gRPC clients against a gateway with workers, and which worker holds each connection
(`tests.runtime.supervisor.test_workers_grpc`).

Every client made here opens a TCP connection of its own (grpc shares one between a
process's channels to one address unless told not to), so the kernel spreads them over
the workers as it does a gateway's many clients; which worker holds a connection is read
from ``/proc`` (the server side's socket in a worker's fds)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.daemon import Daemon
from tests.runtime.supervisor.workerkit import until_serving

X = np.arange(8, dtype=np.float32).reshape(2, 4)
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def grpc_port(daemon: Daemon) -> int:
    return int(daemon.get_json("/v1/status")["components"]["grpc"]["port"])


def worker_pids(daemon: Daemon) -> list[int]:
    return [int(str(w["pid"])) for w in until_serving(daemon, 2)]


def connections(pids: list[int], port: int) -> dict[int, int]:
    """Established connections to ``port`` each process holds (its server side)."""
    established: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "01" and int(cols[1].rpartition(":")[2], 16) == port:
                established.add(int(cols[9]))
    held = {}
    for pid in pids:
        links = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                links.add(str(fd.readlink()))
        held[pid] = sum(1 for i in established if f"socket:[{i}]" in links)
    return held


def infer(client: Any, inputs: list[Any] | None = None) -> Any:
    if inputs is None:
        tensor = tgrpc.InferInput("x", list(X.shape), "FP32")
        tensor.set_data_from_numpy(X)
        inputs = [tensor]
    return client.infer("double", inputs)


def client_of(url: str) -> Any:
    """A client with a connection of its own."""
    return tgrpc.InferenceServerClient(url, channel_args=OWN_CONNECTION)


def channels(daemon: Daemon, count: int) -> list[Any]:
    url = f"127.0.0.1:{grpc_port(daemon)}"
    return [client_of(url) for _ in range(count)]


def close(clients: list[Any]) -> None:
    for client in clients:
        client.close()


def across_workers(daemon: Daemon, call: Callable[[Any], object], count: int = 20) -> list[object]:
    """``call`` on ``count`` fresh channels, both workers holding some: what each answered
    (a failure: its message)."""
    clients = channels(daemon, count)
    answers: list[object] = []
    try:
        for client in clients:
            try:
                answers.append(call(client))
            except InferenceServerException as e:
                answers.append(str(e.message()))
        held = connections(worker_pids(daemon), grpc_port(daemon))
        assert min(held.values()) >= 1, f"the channels reached one worker: {held}"
    finally:
        close(clients)
    return answers

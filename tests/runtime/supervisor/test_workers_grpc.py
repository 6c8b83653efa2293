"""KServe V2 over gRPC on a real gateway with ``[workers] count = 2``: each worker serves the
gRPC port (``SO_REUSEPORT``), the supervisor holds it and keeps the gateway's invariants
(`wasmgate.runtime.supervisor.ports`, `wasmgate.runtime.grpc.gateway`).

Clients and the per-worker connection count come from `grpc_clients`."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException
from tritonclient.utils import shared_memory as shm

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.runtime.bundlekit import BundleKit, slow_model
from tests.runtime.stack import host_profile_name
from tests.runtime.supervisor.grpc_clients import (
    X,
    across_workers,
    channels,
    client_of,
    close,
    connections,
    grpc_port,
    infer,
    worker_pids,
)
from tests.runtime.supervisor.workerkit import TOKEN, serving, until_replaced

pytestmark = pytest.mark.timeout(300)
AUTH = {"authorization": f"Bearer {TOKEN}"}
GRPC_REQUESTS = (
    'wasmgate_requests_total{kind="model",name="double",source="local",transport="grpc"}'
)
CHANNELS = 40


def _config(root: Path, kit: BundleKit, grpc_port: int) -> dict[str, object]:
    return {
        "paths": {"trust_file": kit.save_trust(root / "trust.json")},
        "profile": host_profile_name(),
        "workers": {"count": 2},
        "http": {"management_token": TOKEN},
        "grpc": {"port": grpc_port},
        "shared_memory": {"enabled": True, "max_regions": 4, "max_region_bytes": 1 << 20},
        "limits": {"deadline_ms": 120_000},  # the slow model's run outlasts the default 10 s
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("grpc-workers")
    kit = BundleKit(root / "kit")
    bundles = root / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    kit.build("quiet", 1, adapter=False, model_name="double", out_dir=bundles)
    kit.build("other", 1, adapter=False, model_name="other", out_dir=bundles)
    slow = kit.root / "slow.onnx"
    slow.write_bytes(slow_model(30000))  # ~20 s a run: it outlasts the refusals it causes
    kit.build("abuser", 1, adapter=False, model_name="slow", model_file=slow, out_dir=bundles,
              batching={"max_batch_size": 1, "max_queue_delay_us": 0},
              sections={"limits": {"max_in_flight": 1, "queue_size": 0,
                                   "deadline_ms": 120_000}})  # fmt: skip
    with serving(Daemon(root / "d", _config(root, kit, free_port()))) as daemon:
        yield daemon


def test_both_workers_serve_grpc_and_metrics_count_each_rpc_once(gateway: Daemon) -> None:
    pids, port = worker_pids(gateway), grpc_port(gateway)
    before = gateway.metric(GRPC_REQUESTS)
    clients = channels(gateway, CHANNELS)
    try:
        for client in clients:
            np.testing.assert_array_equal(infer(client).as_numpy("y"), X * 2)
        held = connections(pids, port)
        assert sum(held.values()) == CHANNELS, held  # every channel is a worker's
        assert min(held.values()) >= 1, f"one worker served no channel: {held}"
        # The supervisor serves no gRPC: none of the connections is its own.
        assert gateway.proc is not None
        assert connections([gateway.proc.pid], port) == {gateway.proc.pid: 0}
    finally:
        close(clients)
    # Counted once each, in the worker that served it, summed by the supervisor.
    assert gateway.metric(GRPC_REQUESTS) - before == CHANNELS


def test_max_in_flight_holds_for_the_gateway_across_workers_and_transports(
    gateway: Daemon,
) -> None:
    """``slow`` may run once at a time in the whole gateway: while one gRPC call runs in a
    worker, every other call is refused, over gRPC or HTTP, whichever worker takes it."""
    url = f"127.0.0.1:{grpc_port(gateway)}"
    runner = client_of(url)
    tensor = tgrpc.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    ran: list[object] = []

    def run() -> None:
        try:
            ran.append(runner.infer("slow", [tensor]))
        except InferenceServerException as e:  # said in the failure below
            ran.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        while gateway.metric('wasmgate_in_flight{name="slow"}') < 1:  # the run has started
            time.sleep(0.02)
        doc = json.dumps(
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
        ).encode()
        codes = set()
        for _ in range(10):  # fresh connections: both workers
            try:
                urllib.request.urlopen(f"{gateway.url}/v2/models/slow/infer", doc, timeout=30)
                codes.add(200)
            except urllib.error.HTTPError as e:
                codes.add(e.code)
        refused = across_workers(gateway, lambda c: c.infer("slow", [tensor]))
        assert thread.is_alive(), f"the admitted run ended before the refusals: {ran}"
        assert codes == {429}
        assert all(isinstance(m, str) and "busy" in m.lower() for m in refused), refused
        assert gateway.metric('wasmgate_in_flight{name="slow"}') == 1  # still the one run
    finally:
        thread.join(timeout=120)
        runner.close()
    assert len(ran) == 1  # the one admitted run was answered
    assert not isinstance(ran[0], InferenceServerException), ran[0].message()


def test_the_grpc_card_shows_the_gateway(gateway: Daemon) -> None:
    card = gateway.get_json("/v1/status")["components"]["grpc"]
    assert card["served_by"] == "2 workers (SO_REUSEPORT)"
    assert card["shared"] is False
    assert card["port"] > 0


def _ready_everywhere(daemon: Daemon) -> set[object]:
    return set(across_workers(daemon, lambda c: bool(c.is_model_ready("double"))))


def _failures(daemon: Daemon, call: Callable[[Any], object]) -> list[str]:
    return [a for a in across_workers(daemon, call) if isinstance(a, str)]


def test_an_unload_over_grpc_reaches_every_worker(gateway: Daemon) -> None:
    one = channels(gateway, 1)[0]
    try:
        with pytest.raises(InferenceServerException) as refused:
            one.unload_model("double", headers={"authorization": "Bearer wrong"})
        assert "StatusCode.UNAUTHENTICATED" in str(refused.value.status()), refused.value.message()
        assert _ready_everywhere(gateway) == {True}  # a refused call changed no worker
        one.unload_model("double", headers=AUTH)
        try:
            assert _ready_everywhere(gateway) == {False}
            failed = _failures(gateway, infer)
            assert len(failed) == 20
            assert all("no available versions" in m for m in failed), failed
        finally:
            one.load_model("double", headers=AUTH)
    finally:
        one.close()
    assert _ready_everywhere(gateway) == {True}


def test_a_region_registered_on_one_channel_serves_on_every_worker(gateway: Daemon) -> None:
    key = f"/wg_test-{os.getpid()}-workers"
    handle = shm.create_shared_memory_region("x_in", key, X.nbytes)
    shm.set_shared_memory_region(handle, [X])
    one = channels(gateway, 1)[0]
    try:
        one.register_system_shared_memory("x_in", key, X.nbytes)
        tensor = tgrpc.InferInput("x", list(X.shape), "FP32")
        tensor.set_shared_memory("x_in", X.nbytes)

        def from_region(client: Any) -> None:
            np.testing.assert_array_equal(infer(client, [tensor]).as_numpy("y"), X * 2)

        assert _failures(gateway, from_region) == []
        one.unregister_system_shared_memory("x_in")
        gone = _failures(gateway, from_region)
        assert len(gone) == 20
        assert all("x_in" in m for m in gone), gone
    finally:
        one.close()
        shm.destroy_shared_memory_region(handle)


def test_no_process_outside_the_gateway_shares_the_grpc_port(
    gateway: Daemon, tmp_path: Path
) -> None:
    port = grpc_port(gateway)
    for option in (None, socket.SO_REUSEADDR):  # plain, and as most servers bind
        with socket.socket() as plain:
            if option is not None:
                plain.setsockopt(socket.SOL_SOCKET, option, 1)
            with pytest.raises(OSError, match="Address already in use"):
                plain.bind(("127.0.0.1", port))
    # A second gateway on the same gRPC port: refused at start, saying why.
    kit = BundleKit(tmp_path / "kit")
    (tmp_path / "d").mkdir()
    second = Daemon(tmp_path / "d", _config(tmp_path, kit, port))
    with pytest.raises(RuntimeError, match=f"cannot listen on 127.0.0.1:{port} for gRPC"):
        second.start(timeout=120)
    # What Linux cannot refuse, a same-user process asking for SO_REUSEPORT itself, is
    # named in the status document while it listens.
    with socket.socket() as intruder:
        intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        intruder.bind(("127.0.0.1", port))
        intruder.listen()
        status = gateway.get_json("/v1/status")
        assert status["components"]["workers"]["shared_ports"] == [port]
        assert status["components"]["grpc"]["shared"] is True
        assert any(str(port) in a["message"] for a in status["attention"])
    assert gateway.get_json("/v1/status")["components"]["workers"]["shared_ports"] == []


def test_a_killed_workers_grpc_comes_back(gateway: Daemon) -> None:
    victim = worker_pids(gateway)[0]
    failures: list[str] = []
    served = [0]
    stop = threading.Event()
    url = f"127.0.0.1:{grpc_port(gateway)}"

    def load() -> None:
        while not stop.is_set():
            client = client_of(url)
            try:
                infer(client)
                served[0] += 1
            except InferenceServerException as e:
                failures.append(str(e.status()))
            finally:
                client.close()

    client = threading.Thread(target=load)
    client.start()
    try:
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        until_replaced(gateway, victim, timeout=30)
        time.sleep(0.5)
    finally:
        stop.set()
        client.join()
    # At most the RPC in flight on the killed worker fails (UNAVAILABLE); new channels
    # went to the other worker meanwhile, and reach the new one now.
    assert len(failures) <= 1, failures
    assert all("UNAVAILABLE" in f for f in failures), failures
    assert served[0] > 10
    assert _failures(gateway, infer) == []


def test_a_removal_replaces_every_worker_without_a_failed_rpc(gateway: Daemon) -> None:
    """Last, after the unload and load and the regions: the new workers take those calls
    before they accept (none refuses the model for a moment). A roll (each worker replaced
    by one serving the change) under gRPC load on fresh channels and on one long-lived
    channel: every RPC is answered, but for the few at the edge of a worker's gRPC server
    stopping, which grpcio answers CANCELLED or whose connection the closing socket resets
    (UNAVAILABLE: clients retry both). grpcio cannot take a listening socket from the
    supervisor, as HTTP's workers do, nor send GOAWAY before it stops; docs/architecture.md
    says so."""
    before = set(worker_pids(gateway))
    failures: list[str] = []
    served = [0]
    stop = threading.Event()
    url = f"127.0.0.1:{grpc_port(gateway)}"

    def load(fresh: bool) -> None:
        client = client_of(url)
        while not stop.is_set():
            if fresh:
                client.close()
                client = client_of(url)
            try:
                infer(client)
                served[0] += 1
            except InferenceServerException as e:
                failures.append(f"{e.status()}: {e.message()}")
        client.close()

    clients = [threading.Thread(target=load, args=(fresh,)) for fresh in (True, False)]
    for thread in clients:
        thread.start()
    try:
        req = urllib.request.Request(f"{gateway.url}/v1/bundles/other", method="DELETE",
                                     headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=120) as answer:
            assert answer.status == 200
        assert not set(worker_pids(gateway)) & before, "the workers were not replaced"
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in clients:
            thread.join()
    edge = ("StatusCode.CANCELLED", "StatusCode.UNAVAILABLE: failed to connect")
    assert len(failures) <= 4, failures  # two workers stopping, two clients
    assert all(f.startswith(edge) for f in failures), failures
    assert served[0] > 20


def test_the_fan_out_log_is_not_reachable_from_outside(gateway: Daemon) -> None:
    """The log of fanned-out calls holds their Authorization headers (the management
    token): only the supervisor's private socket serves it, never the public port."""
    for data in (None, b"{}"):  # GET, POST
        request = urllib.request.Request(f"{gateway.url}/v1/fan-out", data=data)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 404
        assert TOKEN not in refused.value.read().decode()

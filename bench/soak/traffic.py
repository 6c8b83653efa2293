"""The soak's requests, one coroutine per request kind, and the open-loop sender.

Kinds (``MIX``, in equal shares of the soak's rate): HTTP V2 JSON and binary tensors and
gRPC to the digits model; MQTT 5 and MQTT 3.1.1 to digits; HTTP requests to ``events``
(the adapter emits an event into the store for each) and ``edge`` (the adapter asks for
the cloud; the local answer serves while the cloud is away). ``ABUSE`` kinds run at a
fixed low rate beside them: HTTP and MQTT 5 requests with a 1 ms deadline, requests to the
``slow`` adapter (spins until its 200 ms deadline stops it), and MQTT 5 requests with
oversize Response Topic / Correlation Data (refused by the daemon, never answered).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import numpy as np

from bench.soak.ledger import LOST_AFTER_S, OK, Ledger
from bench.soak.mqtt_link import MqttLink
from tests.fixtures.benchkit import payload
from wasmgate.runtime.grpc import kserve_v2_pb2 as pb
from wasmgate.runtime.grpc import kserve_v2_service_pb2_grpc as pb_grpc

MIX = ("http-json", "http-binary", "grpc", "mqtt5", "mqtt311", "events", "edge")
ABUSE = {"http-deadline-1ms": 1.0, "mqtt5-deadline-1ms": 1.0, "slow-adapter": 0.5,
         "mqtt5-oversize": 0.5}  # fmt: skip
"""Abusive kinds and their rates (requests per second), whatever the soak's rate."""


@dataclass
class Target:
    url: str
    grpc_port: int


class Traffic:
    """Sends requests of every kind and records them in the ledger."""

    def __init__(self, target: Target, ledger: Ledger, mqtt: MqttLink) -> None:
        self._url, self._ledger, self._mqtt = target.url, ledger, mqtt
        self._grpc_port = target.grpc_port
        self._connect()
        self._seq = itertools.count(1)
        self._rng = np.random.default_rng(0)
        self.events_expected: set[int] = set()
        self.kinds: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
            "http-json": self.http_json, "http-binary": self.http_binary, "grpc": self.grpc,
            "mqtt5": self.mqtt5, "mqtt311": self.mqtt311, "events": self.events,
            "edge": self.edge, "http-deadline-1ms": self.http_deadline,
            "mqtt5-deadline-1ms": self.mqtt5_deadline, "slow-adapter": self.slow,
            "mqtt5-oversize": self.oversize,
        }  # fmt: skip

    def _connect(self) -> None:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64),
            timeout=aiohttp.ClientTimeout(total=LOST_AFTER_S),
        )
        self._channel = grpc.aio.insecure_channel(f"127.0.0.1:{self._grpc_port}")
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """Close the HTTP and gRPC connections (the daemon's sockets to us go away)."""
        await self._http.close()
        await self._channel.close()

    async def reconnect(self) -> None:
        await self.close()
        self._connect()

    def _x(self, seq: int) -> np.ndarray:
        x = self._rng.uniform(0, 16, (1, 64)).astype(np.float32)
        x[0, 0] = seq  # exact in FP32 below 2**24: the events adapter emits it back
        return x

    async def _post(self, kind: str, path: str, body: bytes, headers: dict[str, str]) -> int:
        """POST and record the answer; returns the status (0 when there was none)."""
        self._ledger.sent(kind)
        began = time.perf_counter()
        try:
            async with self._http.post(f"{self._url}{path}", data=body, headers=headers) as r:
                await r.read()
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as e:
            self._ledger.lost(kind, f"{type(e).__name__}: {e}"[:120])
            return 0
        self._ledger.answered(kind, OK if status == 200 else str(status),
                              time.perf_counter() - began)  # fmt: skip
        return status

    async def http_json(self) -> None:
        x = self._x(next(self._seq))
        doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                           "data": x.ravel().tolist()}]}  # fmt: skip
        await self._post("http-json", "/v2/models/digits/infer", json.dumps(doc).encode(), {})

    async def http_binary(self) -> None:
        x = self._x(next(self._seq))
        body, headers = _v2_binary(x)
        await self._post("http-binary", "/v2/models/digits/infer", body, headers)

    async def events(self) -> None:
        seq = next(self._seq)
        if await self._post("events", "/v1/adapters/events", payload(self._x(seq)), {}) == 200:
            self.events_expected.add(seq)

    async def edge(self) -> None:
        await self._post("edge", "/v1/adapters/edge", payload(self._x(next(self._seq))), {})

    async def slow(self) -> None:
        await self._post("slow-adapter", "/v1/adapters/slow", payload(self._x(0)), {})

    async def http_deadline(self) -> None:
        body = payload(self._x(next(self._seq)))
        await self._post("http-deadline-1ms", "/v1/adapters/digits", body,
                         {"X-Wasmgate-Timeout-Ms": "1"})  # fmt: skip

    async def grpc(self) -> None:
        x = self._x(next(self._seq))
        req = pb.ModelInferRequest(
            model_name="digits",
            inputs=[pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32",
                                                           shape=[1, 64])],
            raw_input_contents=[x.astype("<f4").tobytes()],
        )  # fmt: skip
        self._ledger.sent("grpc")
        began = time.perf_counter()
        try:
            await self._stub.ModelInfer(req, timeout=LOST_AFTER_S)
            kind: str | None = OK
        except grpc.aio.AioRpcError as e:
            kind = _grpc_kind(e, time.perf_counter() - began)
            if kind is None:  # no answer from the daemon at all
                self._ledger.lost("grpc", f"{e.code().name}: {e.details()}"[:120])
                return
        self._ledger.answered("grpc", kind or OK, time.perf_counter() - began)

    async def mqtt5(self) -> None:
        rid, body = str(next(self._seq)), payload(self._x(0))
        await self._mqtt.request("mqtt5", rid, lambda: self._mqtt.publish_r5(rid, body))

    async def mqtt5_deadline(self) -> None:
        rid, body = str(next(self._seq)), payload(self._x(0))
        publish = lambda: self._mqtt.publish_r5(rid, body, timeout_ms=1)  # noqa: E731
        await self._mqtt.request("mqtt5-deadline-1ms", rid, publish)

    async def mqtt311(self) -> None:
        rid, x = str(next(self._seq)), self._x(0)
        doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                           "data": x.ravel().tolist()}]}  # fmt: skip
        await self._mqtt.request("mqtt311", rid, lambda: self._mqtt.publish_r311(rid, doc))

    async def oversize(self) -> None:
        """Refused by design: counted as sent, checked against the daemon's counter."""
        self._ledger.sent("mqtt5-oversize")
        self._mqtt.publish_big(payload(self._x(0)))


TRANSPORT_FAILURES = ("failed to connect", "socket closed", "connection reset", "broken pipe",
                      "goaway", "recvmsg", "sendmsg", "connection refused")  # fmt: skip
"""Words of gRPC's own messages when the connection failed (the daemon never said these)."""


def _grpc_kind(e: grpc.aio.AioRpcError, seconds: float) -> str | None:
    """The daemon's answer as an error kind, or None when it never answered: the client's
    deadline passed or the connection failed (the daemon's own UNAVAILABLE answers, Busy
    and NotReady, carry its message)."""
    details = (e.details() or "").lower()
    if seconds >= LOST_AFTER_S - 1:
        return None
    if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) and any(
        w in details for w in TRANSPORT_FAILURES
    ):
        return None
    return f"{e.code().name}{' busy' if 'busy' in details else ''}"


def _v2_binary(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    raw = x.astype("<f4").tobytes()
    tensor = {"name": "input", "datatype": "FP32", "shape": list(x.shape),
              "parameters": {"binary_data_size": len(raw)}}  # fmt: skip
    head = json.dumps({"inputs": [tensor]}).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head))}


class Sender:
    """Open loop: ``rate`` requests per second over `MIX` plus the `ABUSE` rates, each
    request a task of its own (a stalled daemon does not slow the sending down)."""

    def __init__(self, traffic: Traffic) -> None:
        self._traffic = traffic
        self.tasks: set[asyncio.Task[None]] = set()

    def _launch(self, kind: str) -> None:
        task = asyncio.create_task(self._traffic.kinds[kind]())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, rate: float, seconds: float, abuse: bool) -> None:
        began, done = time.perf_counter(), 0
        kinds = itertools.cycle(MIX)
        abused = dict.fromkeys(ABUSE, 0)
        while (elapsed := time.perf_counter() - began) < seconds:
            for _ in range(int(elapsed * rate) - done):
                self._launch(next(kinds))
                done += 1
            for kind, per_s in ABUSE.items() if abuse else ():
                for _ in range(int(elapsed * per_s) - abused[kind]):
                    self._launch(kind)
                    abused[kind] += 1
            await asyncio.sleep(0.02)

    async def drain(self) -> None:
        """Wait for every request sent to be answered or counted lost."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


async def capacity(traffic: Traffic, seconds: float, clients: int = 8) -> float:
    """Closed loop over `MIX` with ``clients`` concurrent requesters: requests per second."""
    stop = time.perf_counter() + seconds
    done = 0

    async def client(offset: int) -> None:
        nonlocal done
        for kind in itertools.islice(itertools.cycle(MIX), offset, None):
            if time.perf_counter() >= stop:
                return
            await traffic.kinds[kind]()
            done += 1

    began = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return done / (time.perf_counter() - began)

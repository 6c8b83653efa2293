"""Fixtures: the ORT-backed test service (as the HTTP tests use) behind the real listener."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as triton

from tests.runtime.grpc.live import LiveGrpc
from tests.runtime.http.service import OrtService
from wasmgate.runtime.ops.metrics import Metrics


@pytest.fixture
def service() -> OrtService:
    return OrtService()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def live(service: OrtService, metrics: Metrics) -> Iterator[LiveGrpc]:
    with LiveGrpc(service, metrics) as server:
        yield server


@pytest.fixture
def client(live: LiveGrpc) -> Iterator[triton.InferenceServerClient]:
    client = triton.InferenceServerClient(live.url)
    try:
        yield client
    finally:
        client.close()

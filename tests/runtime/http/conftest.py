"""Fixtures: the in-test ORT-backed service and the real HTTP app on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.http.server import LiveServer, build_app
from tests.runtime.http.service import OrtService
from wasmgate.runtime.ops.metrics import Metrics


@pytest.fixture
def service() -> OrtService:
    return OrtService()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def server(service: OrtService, metrics: Metrics) -> Iterator[LiveServer]:
    with LiveServer(build_app(service, metrics)) as live:
        yield live

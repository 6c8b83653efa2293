"""Fixtures: the in-test ORT-backed service and the real HTTP app on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiohttp import web

from tests.runtime.http.server import LiveServer
from tests.runtime.http.service import OrtService
from wasmgate.runtime.http import errors, status, v2
from wasmgate.runtime.http import metrics as metrics_routes
from wasmgate.runtime.http.keys import METRICS, SERVICE
from wasmgate.runtime.metrics import Metrics

MAX_BODY = 256 * 1024


def build_app(service: OrtService, metrics: Metrics) -> web.Application:
    """Wired the way the composition root wires it (errors, V2, adapters, metrics, status)."""
    app = web.Application(client_max_size=MAX_BODY)
    app[SERVICE] = service
    app[METRICS] = metrics
    errors.setup(app)
    v2.setup(app)
    metrics_routes.setup(app)
    status.setup(app)
    return app


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

"""schemathesis against a real daemon, from the OpenAPI description it serves.

``runtime/http/openapi.json`` describes the whole HTTP API (KServe V2 + Triton config and
statistics, the raw adapter endpoint, the management API, ``/metrics``, ``/v1/status``);
the daemon serves it at ``GET /openapi.json``. Every operation gets schema-driven requests
(valid and invalid, bounded per operation) with the management token; the daemon must
never answer 5xx, and must still be alive and ready afterwards. The run is random (a new
seed each time, printed by Hypothesis on failure) and keeps every header schemathesis
draws, ``X-Wasmgate-Timeout-Ms`` included: the only 5xx allowed is a 504 that says the
deadline the request itself asked for passed.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import TOKEN, example_bundle

SPEC = Path(__file__).resolve().parents[2] / "runtime" / "http" / "openapi.json"
schema = schemathesis.openapi.from_path(SPEC)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("openapi")
    kit = BenchKit(root / "kit")
    example_bundle(kit, "digits")  # answers bad payloads with status 1 (400), as it should
    daemon = kit.daemon(root / "daemon", config={"http": {"management_token": TOKEN}})
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def test_served_description_is_the_packaged_one(daemon: Daemon) -> None:
    with urllib.request.urlopen(f"{daemon.url}/openapi.json", timeout=10) as r:
        assert json.loads(r.read()) == json.loads(SPEC.read_text())


@pytest.mark.timeout(60)
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: schemathesis.Case[Any], daemon: Daemon) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    response = case.call(base_url=daemon.url, headers=auth, timeout=30)
    if case.formatted_path.endswith("/unload") and response.status_code == HTTPStatus.OK:
        # A name unloaded answers 503 until loaded again, rightly: serve it again at once,
        # so that the next cases find the daemon as it was.
        load = f"{daemon.url}{case.formatted_path.removesuffix('/unload')}/load"
        request = urllib.request.Request(load, data=b"", headers=auth, method="POST")
        with urllib.request.urlopen(request, timeout=30) as r:
            assert r.status == HTTPStatus.OK
    what = f"{case.method} {case.formatted_path} headers={case.headers} body={case.body!r:.300}"
    answer = f"{response.status_code} {response.text[:300]}"
    if response.status_code == HTTPStatus.GATEWAY_TIMEOUT and _asked_for_a_deadline(case):
        assert "deadline" in response.json()["error"], f"{what} -> {answer}"
        return
    assert response.status_code < HTTPStatus.INTERNAL_SERVER_ERROR, f"{what} -> {answer}"


def _asked_for_a_deadline(case: schemathesis.Case[Any]) -> bool:
    """A timeout in the header or the V2 body (``parameters.timeout``) may pass: 504."""
    return "X-Wasmgate-Timeout-Ms" in (case.headers or {}) or "timeout" in repr(case.body)


def test_daemon_survived(daemon: Daemon) -> None:
    assert daemon.proc is not None
    assert daemon.proc.poll() is None
    assert daemon.get_json("/v2/health/ready") == {"ready": True}
    assert "Traceback" not in daemon.log()

"""The status page: ``/v1/status`` JSON, and the HTML page rendered by headless Chromium.

CI needs Debian's ``chromium`` (``apt-get install -y chromium``); without it these tests fail
(no skip), because a status page nobody rendered is not tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.runtime.http.cdp import CHROMIUM_FLAGS, probe
from tests.runtime.http.png import count_colour
from tests.runtime.http.server import LiveServer, build_app
from tests.runtime.http.service import OrtService
from wasmgate.runtime.http import status
from wasmgate.runtime.ops.metrics import Metrics

ADD = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
CHART_BLUE = (0x1F, 0x6F, 0xEB)  # --c1 in status.css: the requests/s and p50 lines


def mqtt_state() -> Mapping[str, object]:
    """The shape of `MqttBridge.status` (a real one: tests/runtime/http/test_status_page.py)."""
    client = {"connected": True, "connects": 2, "disconnects": 1, "session_present": True,
              "resent": 0, "last_error": "ConnectionRefusedError: [Errno 111]",
              "last_error_at": time.time() - 300, "since": time.time() - 60}  # fmt: skip
    counts = {"received": 12345, "answered": 12340, "errors": 5, "in_flight": 0}
    return {"client": client, "broker": "127.0.0.1:1883", "gateway": "gw-1", **counts}


def odd_section() -> Mapping[str, object]:
    """A section the page has no layout for: laid out by its key names, never as JSON."""
    return {"size_bytes": 67108864, "started_at": time.time() - 300, "window_s": 90,
            "nested": {"deep": {"count": 12345, "ok": False}}, "items": [{"a": 1}, {"a": 2}],
            "last_error": "boom", "last_error_at": time.time() - 30}  # fmt: skip


def broken_cloud() -> Mapping[str, object]:
    raise ConnectionError("cloud endpoint unreachable")


def fleet_report() -> Mapping[str, object]:
    """A deployment report: one bundle failed, one local, the last refused document."""
    bundles = {
        "digits": {"version": 3, "digest": "sha256:aa", "state": "failed",
                   "error": "selftest returned status 2", "staged_percent": None},
        "mine": {"version": 1, "digest": "sha256:bb", "state": "local", "error": None,
                 "staged_percent": None},
        "other": {"version": 2, "digest": "sha256:cc", "state": "applied", "error": None,
                  "staged_percent": 25},
    }  # fmt: skip
    refused = {"serial": 6, "error": "FleetReplayError: serial 6 not above 7"}
    return {"format": "wasmgate-deployment/1", "gateway": "gw-1", "groups": ["g1"],
            "serial": 7, "state": "failed", "reason": "selftest returned status 2",
            "refused": refused, "bundles": bundles, "time": "2026-12-01T05:00:00Z"}  # fmt: skip


@pytest.fixture
def status_server(service: OrtService, metrics: Metrics) -> Iterator[LiveServer]:
    app = build_app(service, metrics)
    status.add_provider(app, "mqtt", mqtt_state)
    status.add_provider(app, "cloud", broken_cloud)
    status.add_provider(app, "fleet", fleet_report)
    status.add_provider(app, "odd", odd_section)
    with LiveServer(app) as live:
        for _ in range(3):
            reply = live.request("POST", "/v2/models/add/infer", json.dumps(ADD).encode())
            assert reply.status == 200
        assert live.request("POST", "/v1/adapters/busy", b"x").status == 429
        yield live


def test_status_json(status_server: LiveServer) -> None:
    reply = status_server.request("GET", "/v1/status")
    assert reply.status == 200
    doc = json.loads(reply.body)
    assert doc["ready"] is True
    rows = {row["name"]: row for row in doc["models"]}
    assert set(rows) >= {"add", "identity", "bf16", "echo", "busy"}
    add = rows["add"]
    assert (add["version"], add["provider"], add["precision"]) == (
        3,
        "CPUExecutionProvider",
        "fp32",
    )
    assert (add["requests"], add["errors"], add["sources"]) == (3, 0, {"local": 3})
    assert add["p50_ms"] > 0
    assert (rows["busy"]["requests"], rows["busy"]["errors"]) == (1, 1)
    assert rows["bf16"]["precision"] == "bf16"
    assert doc["components"]["mqtt"]["client"]["connected"] is True
    assert doc["components"]["cloud"] == {"error": "ConnectionError: cloud endpoint unreachable"}


class Table(HTMLParser):
    """Collects the text of every ``<tr data-name=...>`` row's cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self._row: list[str] | None = None
        self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        name = dict(attrs).get("data-name")
        if tag == "tr" and name is not None:
            self._row = self.rows.setdefault(name, [])
        elif tag == "td" and self._row is not None:
            self._in_cell = True
            self._row.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_cell = False
        elif tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_cell and self._row is not None:
            self._row[-1] += data


def chromium(tmp_path: Path, *args: str, width: int = 1400) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    assert binary is not None, "install Debian's chromium: apt-get install -y chromium"
    profile = tmp_path / "chromium-profile"
    size = f"--window-size={width},900"
    command = [binary, *CHROMIUM_FLAGS, size, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=True)


def rendered_dom(tmp_path: Path, url: str, width: int = 1400) -> str:
    """The DOM after the page's script loaded its data.

    Virtual time runs ahead of the real network: on a loaded machine the fetch may still be
    pending when a short budget ends, so longer budgets are tried before giving up.
    """
    dom = ""
    for budget in (3000, 10000, 30000):
        dom = chromium(
            tmp_path, f"--virtual-time-budget={budget}", "--dump-dom", url, width=width
        ).stdout
        if 'data-state="loaded"' in dom:
            break
    return dom


def test_page_renders_in_headless_chromium(status_server: LiveServer, tmp_path: Path) -> None:
    url = f"http://{status_server.url}/"
    dom = rendered_dom(tmp_path, url)
    assert 'data-state="loaded"' in dom, dom[-2000:]
    table = Table()
    table.feed(dom)
    # Models: name, ready, requests, adapter calls, errors, p50, p99, runs on, sources,
    # bundle, version.
    add = table.rows["add"]
    assert add[:5] == ["add", "yes", "3", "0", "0"]
    assert add[5].endswith(" ms")
    assert float(add[5].split()[0]) > 0
    assert add[7:] == ["CPU · fp32", "local 3", "demo", "v3"]
    # Adapters: name, ready, requests, errors, ...
    assert table.rows["busy"][:4] == ["busy", "yes", "1", "1"]
    assert table.rows["bf16"][7] == "CPU · bf16"
    assert "ready" in dom
    assert 'id="component-mqtt"' in dom
    assert "127.0.0.1:1883" in dom
    assert '<span class="badge ok" id="mqtt-badge" title="127.0.0.1:1883">MQTT connected' in dom
    assert "12,345 received" in dom
    assert "unavailable: ConnectionError: cloud endpoint unreachable" in dom


def test_a_section_without_a_layout_is_read_by_its_keys(
    status_server: LiveServer, tmp_path: Path
) -> None:
    found = probe(tmp_path, f"http://{status_server.url}/", 390)
    assert (found["rawNumbers"], found["words"], found["perChar"]) == ([], [], [])
    odd = found["cards"]["component-odd"]
    for shown in ("size bytes 64 MiB", "started at 5 min ago", "window 1 min 30 s",
                  "nested count ok deep 12,345 no", "items a 1 1 2 2",
                  "error 30 s ago: boom"):  # fmt: skip
        assert shown in odd, odd
    mqtt = found["cards"]["component-mqtt"]
    assert "last error 5 min ago: ConnectionRefusedError" in mqtt  # history: connected now


class Charts(HTMLParser):
    """Per ``data-chart`` card: how many drawn lines and points its SVG charts hold."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: dict[str, int] = {}
        self._card: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        card = found.get("data-chart")
        if card:
            self._card = card
            self.marks.setdefault(card, 0)
        elif (
            self._card
            and tag in ("polyline", "circle")
            and (found.get("points") or found.get("cx"))
        ):
            self.marks[self._card] += 1


@pytest.mark.parametrize("width", [1280, 390])  # a laptop and a phone
def test_dashboard_charts_and_no_sideways_scroll(
    status_server: LiveServer, tmp_path: Path, width: int
) -> None:
    url = f"http://{status_server.url}/"
    dom = rendered_dom(tmp_path, url, width)
    assert 'data-state="loaded"' in dom, dom[-2000:]
    assert 'data-hscroll="no"' in dom, f"the page scrolls sideways at {width} px"
    charts = Charts()
    charts.feed(dom)
    assert charts.marks.get("add", 0) >= 3, charts.marks  # req/s, p50, p99 at least
    assert "busy" in charts.marks  # errors count as traffic too
    assert '{"' not in dom.split('id="components"', 1)[1]  # components are lists, not JSON
    shot = tmp_path / f"status-{width}.png"
    chromium(tmp_path, "--virtual-time-budget=3000", f"--screenshot={shot}", url, width=width)
    # The chart lines are drawn: pixels of their colour are on the picture.
    assert count_colour(shot.read_bytes(), CHART_BLUE) > 50


def staged_bundles() -> Mapping[str, object]:
    """A bundle with a gated candidate (10 %) and the verdict that aborted an earlier one."""
    measured = {"requests": 40, "errors": 20, "error_share": 0.5, "p99_ms": 9.0,
                "current_p99_ms": 3.0, "p99_ratio": 3.0}  # fmt: skip
    gates = {"min_requests": 20, "max_error_share": 0.1, "max_p99_ratio": 2.0, "window_s": 60.0}
    verdict = {"name": "digits", "version": 2, "outcome": "abort", "measured": measured,
               "reasons": ["error share 0.5 > 0.1"], "at": 0.0}  # fmt: skip
    staged = {"version": 3, "percent": 10, "gates": gates, "measured": measured}
    serving = [{"name": "digits", "version": 1, "adapter": "digits", "models": {},
                "staged": staged, "release": verdict}]  # fmt: skip
    return {"serving": serving, "failures": []}


def test_staged_candidate_shows_its_gates_and_the_last_verdict(
    service: OrtService, metrics: Metrics, tmp_path: Path
) -> None:
    app = build_app(service, metrics)
    status.add_provider(app, "bundles", staged_bundles)
    with LiveServer(app) as live:
        dom = rendered_dom(tmp_path, f"http://{live.url}/")
    assert 'data-state="loaded"' in dom, dom[-2000:]
    card = dom.split('data-bundle="digits"', 1)[1].split("</div></div>", 1)[0]
    assert "staged v3: 10% of requests" in card
    assert "0.5 (max 0.1)" in card  # error share measured vs its gate
    assert "3 (max 2)" in card  # p99 ratio
    assert "40 (min 20)" in card
    assert "gates aborted v2: error share 0.5 &gt; 0.1" in card


def test_fleet_panel_shows_the_deployment_report(
    service: OrtService, metrics: Metrics, tmp_path: Path
) -> None:
    app = build_app(service, metrics)
    status.add_provider(app, "fleet", fleet_report)
    with LiveServer(app) as live:
        dom = rendered_dom(tmp_path, f"http://{live.url}/")
    assert 'data-state="loaded"' in dom, dom[-2000:]
    panel = dom.split('id="fleet-report"', 1)[1].split("</table>", 1)[0]
    assert 'serial <span class="ident">7</span>' in panel
    assert "refused 6: FleetReplayError: serial 6 not above 7" in panel
    table = Table()
    table.feed(panel.split("<table>", 1)[1])
    assert table.rows["digits"] == ["digits", "v3", "failed", "selftest returned status 2"]
    none = "\N{EN DASH}"  # what the page shows for "no error"
    assert table.rows["mine"] == ["mine", "v1", "local", none]
    assert table.rows["other"] == ["other", "v2 (25%)", "applied", none]
    assert 'id="component-fleet"' not in dom  # shown once, in its panel


def rolled_back_report() -> Mapping[str, object]:
    """Applied again after the rollout's rollback, its failure kept; ms-timestamp serials."""
    failure = {"serial": 1796476668214, "bundle": "digits", "version": 1796476685,
               "error": "RegistryPlainHttp: GET https://r/v2/x: give --insecure",
               "at": "2026-12-05T17:00:00Z"}  # fmt: skip
    return {**fleet_report(), "serial": 1796476668215, "state": "applied", "reason": None,
            "refused": None, "last_failure": failure, "bundles": {}}  # fmt: skip


def test_fleet_panel_shows_a_rolled_back_failure_and_serials_as_dates(
    service: OrtService, metrics: Metrics, tmp_path: Path
) -> None:
    app = build_app(service, metrics)
    status.add_provider(app, "fleet", rolled_back_report)
    with LiveServer(app) as live:
        found = probe(tmp_path, f"http://{live.url}/", 390)
    panel = found["cards"]["fleet-report"]
    assert "serial 2026-12-05 " in panel, panel  # not 1796476668215
    assert "1796476668" not in panel
    assert "failed, rolled back" in panel
    assert "failed (digits 2026-12-05 " in panel, panel
    assert "rolled back: RegistryPlainHttp: GET https://r/v2/x: give --insecure" in panel
    assert found["rawNumbers"] == []

"""A fleet whose broker restarts does not come back in the same second (issue 53).

Real mosquitto, real `MqttClient`s. Before ``mqtt.reconnect_spread_s`` every client tried
again at once, then on the same doubling schedule (0.2 s, 0.4 s, ... with +-20 % jitter),
so all of them reconnected within a few hundred milliseconds of the broker's return: at
10,000 gateways a storm of connects, retained replays and reports in one second (the fleet
simulator measured 1,981 connects in one second).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from types import SimpleNamespace

import pytest

from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
from tests.runtime.mqtt.conftest import bridge_settings
from wasmgate.runtime.mqtt import client as client_module
from wasmgate.runtime.mqtt.client import MqttClient
from wasmgate.runtime.mqtt.messages import Outgoing

CLIENTS = 12


def _client(port: int, i: int, spread: float, connects: list[tuple[int, float]]) -> MqttClient:
    settings = bridge_settings(port, reconnect_spread_s=spread, gateway_id=f"gw{i}")
    will = Outgoing(f"wasmgate/v1/gw{i}/status", b"offline", qos=1, retain=True)
    return MqttClient(
        settings, f"wg-spread-{i}", will=will,
        on_connect=lambda _s: connects.append((i, time.monotonic())),
        on_message=lambda _m: None,
    )  # fmt: skip


async def _reconnect_times(broker: Broker, spread: float) -> list[float]:
    """Each client's first connect after the broker came back, from the restart."""
    connects: list[tuple[int, float]] = []
    clients = [_client(broker.port, i, spread, connects) for i in range(CLIENTS)]
    for c in clients:
        c.start()
    try:
        await until_async(lambda: len(connects) == CLIENTS, "all connected", 10)
        connects.clear()
        await asyncio.to_thread(broker.stop)
        back = time.monotonic()
        await asyncio.to_thread(broker.start)  # a quick restart: back before most first tries
        await until_async(lambda: len({i for i, _ in connects}) == CLIENTS, "reconnected", 30)
        return sorted(t - back for _, t in connects)
    finally:
        await asyncio.gather(*(c.stop(None) for c in clients))


async def test_reconnects_after_a_broker_restart_spread_over_the_window(
    mosquitto: Broker,
) -> None:
    times = await _reconnect_times(mosquitto, spread=4.0)
    # uniform over 4 s: 12 clients all inside one 1.5 s span is a ~1e-3 chance
    assert times[-1] - times[0] > 1.5, times
    assert times[-1] < 4.0 + 2.0, times  # the window, plus one backoff step and a margin


async def test_without_spread_they_come_back_together(mosquitto: Broker) -> None:
    """The control: with ``reconnect_spread_s = 0`` the old lockstep remains."""
    times = await _reconnect_times(mosquitto, spread=0.0)
    assert times[-1] - times[0] < 1.5, times


def _retries(log: str) -> list[float]:
    return [float(x) for x in re.findall(r"retry in ([\d.]+)s", log)]


async def test_a_try_that_finds_the_broker_still_down_draws_again_from_the_window(
    mosquitto: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After a loss, a failed try waits a new share of the window, not the backoff's 0.2 s:
    on the backoff, the gateways that tried while a slow broker was down came back in the
    same second after its return (a 10,000-gateway fleet sim: 318 connects in one second
    at the broker). `random.uniform` answers the top of its range: the rule is under
    test here, not the draw; before any connection the window does not apply (control)."""
    monkeypatch.setattr(client_module, "random", SimpleNamespace(uniform=lambda _a, b: b))
    caplog.set_level(logging.WARNING, logger="wasmgate.mqtt")
    connects: list[tuple[int, float]] = []
    await asyncio.to_thread(mosquitto.stop)
    c = _client(mosquitto.port, 0, 1.5, connects)
    c.start()
    try:
        await until_async(lambda: len(_retries(caplog.text)) >= 2, "two failed first tries", 10)
        assert max(_retries(caplog.text)) < 1.5, caplog.text  # the backoff: 0.24 s, 0.48 s
        await asyncio.to_thread(mosquitto.start)
        await until_async(lambda: connects, "connected", 10)
        caplog.clear()
        await asyncio.to_thread(mosquitto.stop)
        await until_async(lambda: _retries(caplog.text), "a failed try after the loss", 10)
        await asyncio.to_thread(mosquitto.start)
        await until_async(lambda: len(connects) == 2, "reconnected", 10)
    finally:
        await c.stop(None)
    assert set(_retries(caplog.text)) == {1.5}, caplog.text  # every retry after the loss

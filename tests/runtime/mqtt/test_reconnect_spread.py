"""A fleet whose broker restarts does not come back in the same second (issue 53).

Real mosquitto, real `MqttClient`s. Before ``mqtt.reconnect_spread_s`` every client tried
again at once, then on the same doubling schedule (0.2 s, 0.4 s, ... with +-20 % jitter),
so all of them reconnected within a few hundred milliseconds of the broker's return: at
10,000 gateways a storm of connects, retained replays and reports in one second (the fleet
simulator measured 1,981 connects in one second).
"""

from __future__ import annotations

import asyncio
import time

from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
from tests.runtime.mqtt.conftest import bridge_settings
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

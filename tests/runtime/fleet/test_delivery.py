"""Delivery: retained documents through the real bridge and mosquitto, and the desired file.

The reconciler is not under test here: ``offer`` records what it is handed (and refuses
what a test marks as bad), so these tests pin which document applies and when.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
from tests.runtime.fleet.daemonkit import publish
from tests.runtime.fleet.reconcilekit import document
from tests.runtime.mqtt.conftest import bridge_settings
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.errors import DocumentRefused
from wasmgate.runtime.fleet.delivery import Delivery, desired_topics
from wasmgate.runtime.fleet.state import peek_serial
from wasmgate.runtime.mqtt import Channel, MqttBridge
from wasmgate.signing.errors import FleetReplayError, FleetSignatureError, SigningError

OWN, G1, G2 = desired_topics("wasmgate/v1", "gw1", ("g1", "g2"))
MAX = 4096


def doc(serial: int, tag: str = "") -> bytes:
    return document(serial, tag=tag)  # ``tag``: distinct bytes for one serial


class Offers:
    """The reconciler's side: records offers and refusals; ``bad`` documents fail the check
    with the given error (``refuse_on_offer`` ones fail only when offered)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.refused: list[tuple[str, str]] = []
        self.refuse_on_offer: set[bytes] = set()
        self.bad: dict[bytes, SigningError] = {}
        self.changed = asyncio.Event()

    async def offer(self, data: bytes, source: str) -> bool:
        self.got.append((source, data))
        self.changed.set()
        if data in self.refuse_on_offer or data in self.bad:
            raise DocumentRefused("FleetReplayError: test")
        return True

    async def judge(self, data: bytes) -> int:
        if data in self.bad:
            raise self.bad[data]
        serial = peek_serial(data)
        assert serial is not None
        return serial

    def refuse(self, data: bytes, source: str, e: SigningError) -> None:
        self.refused.append((source, type(e).__name__))
        self.changed.set()

    async def next(self, count: int) -> None:
        async with asyncio.timeout(20):
            while len(self.got) < count:
                self.changed.clear()
                await self.changed.wait()

    async def refusals(self, count: int) -> None:
        async with asyncio.timeout(20):
            while len(self.refused) < count:
                self.changed.clear()
                await self.changed.wait()


async def settled(delivery: Delivery, received: int, timeout: float = 10) -> None:
    """Until ``received`` documents came in over MQTT and a pass has handled them all."""
    await until_async(
        lambda: delivery.received >= received and delivery.handled == delivery.received,
        f"{received} documents received and handled",
        timeout,
    )


@asynccontextmanager
async def member(
    broker: Broker, offers: Offers, desired: Path | None = None
) -> AsyncIterator[Delivery]:
    delivery = Delivery(offers, (OWN, G1, G2), desired, MAX)
    channel = Channel(delivery.topics, delivery.on_message)
    async with delivery.running():
        bridge = MqttBridge(bridge_settings(broker.port), FakeService(), channels=[channel])
        async with bridge:
            async with asyncio.timeout(10):
                await bridge.wait_connected()
            yield delivery


async def test_retained_group_documents_then_the_gateway_one_wins(mosquitto: Broker) -> None:
    publish(mosquitto, G1, doc(5))
    publish(mosquitto, G2, doc(7))
    offers = Offers()
    async with member(mosquitto, offers) as delivery:
        await settled(delivery, 2)  # both retained documents are in
        assert delivery.choice == (G2, doc(7))  # the highest group serial
        publish(mosquitto, OWN, doc(3, "own"))
        await offers.next(len(offers.got) + 1)
        assert offers.got[-1] == (f"mqtt {OWN}", doc(3, "own"))  # wins, whatever its serial
        publish(mosquitto, G1, doc(9))  # a newer group document does not override it
        await settled(delivery, delivery.received + 1)
        assert offers.got[-1][1] == doc(3, "own")
        publish(mosquitto, OWN, b"")  # cleared: the groups apply again
        await offers.next(len(offers.got) + 1)
        assert offers.got[-1] == (f"mqtt {G1}", doc(9))


async def test_a_reconnect_replays_retained_documents_but_they_are_offered_once(
    mosquitto: Broker,
) -> None:
    offers = Offers()
    publish(mosquitto, OWN, doc(4))
    async with member(mosquitto, offers) as delivery:
        await offers.next(1)
        mosquitto.stop()
        mosquitto.start()
        await settled(delivery, 2, timeout=30)  # reconnected: the retained one came again
    assert offers.got == [(f"mqtt {OWN}", doc(4))]


async def test_oversize_documents_are_ignored_and_the_bridge_keeps_going(
    mosquitto: Broker,
) -> None:
    offers = Offers()
    async with member(mosquitto, offers) as delivery:
        publish(mosquitto, OWN, b"{" + b" " * MAX + b"}")
        publish(mosquitto, G1, doc(2))
        await offers.next(1)
        assert offers.got == [(f"mqtt {G1}", doc(2))]
        assert delivery.choice == (G1, doc(2))


async def test_the_desired_file_applies_at_start_on_change_and_on_reread(
    tmp_path: Path, mosquitto: Broker
) -> None:
    desired = tmp_path / "desired.json"
    desired.write_bytes(doc(1))
    offers = Offers()
    offers.refuse_on_offer.add(doc(1))
    async with member(mosquitto, offers, desired) as delivery:
        assert offers.got == [("file", doc(1))]  # before the first poll: at start
        desired.write_bytes(doc(2, "second"))
        os.utime(desired, ns=(1, 1))
        await offers.next(2)
        assert offers.got[-1] == ("file", doc(2, "second"))
        await delivery.reread()  # SIGHUP: offered again although unchanged
        assert offers.got[-1] == ("file", doc(2, "second"))
        assert len(offers.got) == 3


async def test_a_refused_gateway_document_does_not_shadow_a_valid_group_one(
    mosquitto: Broker,
) -> None:
    offers = Offers()
    forged = doc(99, "forged")
    offers.bad[forged] = FleetSignatureError("unknown key")
    publish(mosquitto, OWN, forged)
    async with member(mosquitto, offers) as delivery:
        await offers.refusals(1)
        assert offers.refused == [(f"mqtt {OWN}", "FleetSignatureError")]
        publish(mosquitto, G1, doc(30))
        await offers.next(1)
        assert offers.got == [(f"mqtt {G1}", doc(30))]  # the forged one was never offered
        assert delivery.choice == (G1, doc(30))
        publish(mosquitto, G2, doc(31))  # more news: the forged one is not reported again
        await offers.next(2)
        assert offers.refused == [(f"mqtt {OWN}", "FleetSignatureError")]
        publish(mosquitto, OWN, b"")  # cleared, then the same bytes again: news again
        publish(mosquitto, OWN, forged)
        await offers.refusals(2)
        assert delivery.choice == (G2, doc(31))


async def test_a_forged_huge_serial_on_one_group_does_not_beat_a_valid_other_group(
    mosquitto: Broker,
) -> None:
    offers = Offers()
    forged = doc(10**9, "forged")
    offers.bad[forged] = FleetSignatureError("unknown key")
    publish(mosquitto, G2, forged)
    publish(mosquitto, G1, doc(5))
    async with member(mosquitto, offers) as delivery:
        await offers.next(1)
        await offers.refusals(1)
        assert offers.got == [(f"mqtt {G1}", doc(5))]
        assert offers.refused == [(f"mqtt {G2}", "FleetSignatureError")]
        assert delivery.choice == (G1, doc(5))


async def test_an_older_group_document_is_superseded_not_reported_but_an_own_one_is(
    mosquitto: Broker,
) -> None:
    offers = Offers()
    old_group, old_own = doc(3, "g"), doc(2, "own")
    offers.bad[old_group] = FleetReplayError("not above 7")
    offers.bad[old_own] = FleetReplayError("not above 7")
    publish(mosquitto, G1, old_group)
    publish(mosquitto, G2, doc(7))
    async with member(mosquitto, offers) as delivery:
        await offers.next(1)
        assert delivery.choice == (G2, doc(7))
        assert offers.refused == []  # a genuine older group document is no attack
        publish(mosquitto, OWN, old_own)  # the gateway's own replayed: reported
        await offers.refusals(1)
        assert offers.refused == [(f"mqtt {OWN}", "FleetReplayError")]
        assert delivery.choice == (G2, doc(7))

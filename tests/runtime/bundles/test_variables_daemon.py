"""Operator variables in a real daemon, from every way in: config, management API, MQTT.

Bundle ``vars`` declares ``tag`` (the probe guest echoes it: ``<tag>:hi``), ``gain`` (int
1..10) and ``ratio`` (float 0..1) overridable; bundle ``fixed`` signs ``tag`` and declares
nothing. Whatever the operator sends, ``fixed`` keeps answering ``fixed:hi``; a refused
update changes nothing; what the operator set survives a SIGKILL.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.reliability.conftest import TOKEN, put_bundle, wait_until
from tests.runtime.bundlekit import BundleKit
from tests.runtime.trustkit import GATEWAY, ROOT, daemon_config, echo
from wasmgate.runtime.mqtt._paho_private import close_threaded

DECLARED = {
    "tag": {"type": "string", "max_length": 16},
    "gain": {"type": "int", "min": 1, "max": 10, "default": 3},
    "ratio": {"type": "float", "min": 0, "max": 1, "default": 0.5},
}


def put_variables(
    daemon: Daemon, bundle: str, body: bytes, token: str | None = TOKEN
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(
        f"{daemon.url}/v1/bundles/{bundle}/variables", data=body, method="PUT", headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def variables(daemon: Daemon) -> dict[str, Any]:
    section: dict[str, Any] = daemon.get_json("/v1/status")["components"]["variables"]
    return section


def values(daemon: Daemon) -> dict[str, Any]:
    found = variables(daemon)["bundles"]["vars"]
    return {name: (v["value"], v["source"]) for name, v in found.items()}


def publish_retained(broker: Broker, payload: bytes) -> None:
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        client.publish(f"{ROOT}/variables", payload, qos=1, retain=True).wait_for_publish(10)
    finally:
        close_threaded(client)


@pytest.fixture
def daemon(tmp_path: Path, daemon_factory: Callable[..., Daemon], mosquitto: Broker) -> Daemon:
    kit = BundleKit(tmp_path / "kit")
    trust = kit.save_trust(tmp_path / "trust.json")
    config = daemon_config(
        trust,
        mqtt={"host": mosquitto.host, "port": mosquitto.port, "gateway_id": GATEWAY},
        variables={
            "vars": {"tag": "from-config", "gain": 99},  # gain out of range: default kept
            "fixed": {"tag": "hacked"},  # signed, not overridable: refused
        },
    )
    daemon = daemon_factory(config=config, name="d")
    declared = {"variables": DECLARED}
    assert (
        put_bundle(daemon, kit.build("vars", 1, model=False, sections=declared).read_bytes())[0]
        == 201
    )
    assert (
        put_bundle(daemon, kit.build("fixed", 1, tag="fixed", model=False).read_bytes())[0] == 201
    )
    return daemon


def test_config_values_apply_only_where_declared_and_in_range(daemon: Daemon) -> None:
    assert echo(daemon, "vars") == (200, b"from-config:hi")
    assert echo(daemon, "fixed") == (200, b"fixed:hi")
    assert values(daemon) == {
        "tag": ("from-config", "config"),
        "gain": (3, "default"),
        "ratio": (0.5, "default"),
    }
    assert "fixed" not in variables(daemon)["bundles"]
    for _ in range(3):
        variables(daemon)  # every status poll resolves the layers again: logged once only
    assert daemon.log().count("gain: 99 is outside [1, 10]") == 1


def test_sighup_applies_new_config_values_within_the_same_rules(daemon: Daemon) -> None:
    """The config layer is read again on SIGHUP: the guest sees a changed value at once, an
    out-of-range one is still skipped, and a signed param still cannot change."""
    text = daemon.config_path.read_text()
    for written in ('"from-config"', '"gain" = 99', '"hacked"'):
        assert written in text
    text = text.replace('"from-config"', '"from-sighup"').replace('"gain" = 99', '"gain" = 7')
    daemon.config_path.write_text(text.replace('"hacked"', '"hacked-again"'))
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: echo(daemon, "vars") == (200, b"from-sighup:hi"), 30, "the new tag")
    assert values(daemon) == {
        "tag": ("from-sighup", "config"),
        "gain": (7, "config"),
        "ratio": (0.5, "default"),
    }
    assert echo(daemon, "fixed") == (200, b"fixed:hi")
    daemon.config_path.write_text(text.replace('"gain" = 7', '"gain" = 11'))  # out of range
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: values(daemon)["gain"] == (3, "default"), 30, "gain refused")
    assert echo(daemon, "vars") == (200, b"from-sighup:hi")


def test_management_api_checks_every_value_and_changes_nothing_on_refusal(
    daemon: Daemon,
) -> None:
    status, body = put_variables(daemon, "vars", b'{"tag": "op", "gain": 7}')
    assert status == 200, body
    assert body["variables"]["gain"]["value"] == 7
    assert echo(daemon, "vars") == (200, b"op:hi")
    refused = {
        b'{"gain": 11}': "outside [1, 10]",
        b'{"gain": 5, "tag": "seventeen-chars!!"}': "at most 16 characters",
        b'{"gain": 2.0}': "want an integer",
        b'{"gain": true}': "want an integer",
        b'{"ratio": NaN}': "finite",
        b'{"ratio": 1e999}': "finite",
        b'{"ratio": -1e308}': "outside [0, 1]",
        b'{"ratio": "0.5"}': "want a number",
        b'{"nope": 1}': "no variable 'nope'",
        b'{"answer_content_type": "text/plain"}': "no variable",
        b"[1]": "JSON object",
        b"{": "not JSON",
        b"{}": "no variables",
    }
    for body_bytes, why in refused.items():
        status, body = put_variables(daemon, "vars", body_bytes)
        assert status == 400, body_bytes
        assert why in body["error"], (body_bytes, body)
    assert values(daemon) == {
        "tag": ("op", "operator"),
        "gain": (7, "operator"),
        "ratio": (0.5, "default"),
    }
    status, body = put_variables(daemon, "fixed", b'{"tag": "hacked"}')
    assert status == 400
    assert "signed and not declared overridable" in body["error"]
    assert echo(daemon, "fixed") == (200, b"fixed:hi")
    assert put_variables(daemon, "vars", b'{"tag": "x"}', token=None)[0] == 401
    assert put_variables(daemon, "vars", b'{"tag": "x"}', token="wrong")[0] == 401
    assert put_variables(daemon, "ghost", b'{"tag": "x"}')[0] == 404
    assert echo(daemon, "vars") == (200, b"op:hi")
    # null clears the operator's value: back to the config's
    assert put_variables(daemon, "vars", b'{"tag": null}')[0] == 200
    assert echo(daemon, "vars") == (200, b"from-config:hi")


def test_mqtt_document_is_all_or_nothing_and_operator_values_survive_sigkill(
    daemon: Daemon, mosquitto: Broker
) -> None:
    # One refused entry (fixed's signed tag) refuses the whole document.
    publish_retained(mosquitto, b'{"vars": {"tag": "mqtt"}, "fixed": {"tag": "hacked"}}')
    wait_until(lambda: variables(daemon)["last_refusal"] is not None, 20, "mqtt refusal")
    assert "signed and not declared overridable" in variables(daemon)["last_refusal"]
    assert echo(daemon, "vars") == (200, b"from-config:hi")
    assert echo(daemon, "fixed") == (200, b"fixed:hi")

    publish_retained(mosquitto, b'{"vars": {"tag": "mqtt", "ratio": 0.25}}')
    wait_until(lambda: echo(daemon, "vars") == (200, b"mqtt:hi"), 20, "mqtt variables")
    assert values(daemon)["ratio"] == (0.25, "operator")

    publish_retained(mosquitto, b"")  # clears the retained document: nothing changes
    assert put_variables(daemon, "vars", b'{"tag": "kept"}')[0] == 200
    daemon.kill()
    daemon.start()
    assert echo(daemon, "vars") == (200, b"kept:hi")
    assert values(daemon)["ratio"] == (0.25, "operator")
    assert echo(daemon, "fixed") == (200, b"fixed:hi")


def test_an_mqtt_document_reaches_every_worker(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], mosquitto: Broker
) -> None:
    """With ``[workers] count = 2`` each worker applies the retained document itself (its
    own subscription, never through the shared group): every connection, whichever worker
    it lands on, answers with the operator's value."""
    kit = BundleKit(tmp_path / "kit")
    config = daemon_config(
        kit.save_trust(tmp_path / "trust.json"),
        mqtt={"host": mosquitto.host, "port": mosquitto.port, "gateway_id": GATEWAY},
        workers={"count": 2},
    )
    daemon = daemon_factory(config=config, name="w")
    declared = {"variables": DECLARED}
    bundle = kit.build("vars", 1, model=False, sections=declared).read_bytes()
    status, body = put_bundle(daemon, bundle)
    assert status == 201, body
    publish_retained(mosquitto, b'{"vars": {"tag": "every"}}')
    wait_until(lambda: echo(daemon, "vars") == (200, b"every:hi"), 20, "mqtt variables")
    # Fresh connections spread over both workers: none may answer with the old value.
    seen = {echo(daemon, "vars") for _ in range(30)}
    assert seen == {(200, b"every:hi")}, daemon.log()[-6000:]
    assert values(daemon)["tag"] == ("every", "operator")

"""paho in the bridge's terms: a paho client built from ``MqttSettings``, our
``Outgoing`` as paho's publish properties and paho's message as ``Incoming``.

The client (``client.py``) drives what is built here from the asyncio loop; nothing here
keeps state between calls.
"""

from __future__ import annotations

import logging
import ssl
import time

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wasmgate.runtime.mqtt._paho_private import BufferedClient
from wasmgate.runtime.mqtt.messages import Incoming, Outgoing
from wasmgate.runtime.ops.config import MqttSettings

log = logging.getLogger("wasmgate.mqtt")


class _ClosingSSLSocket(ssl.SSLSocket):
    """Closes itself when the TLS handshake fails.

    paho's ``_ssl_wrap_socket`` raises out of ``do_handshake()`` without closing the socket
    it wrapped, so every refused handshake (wrong CA, expired certificate) would leave an
    open socket behind until garbage collection, with a ResourceWarning per retry.
    """

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except BaseException:
            self.close()
            raise


def build_client(
    settings: MqttSettings, client_id: str, will: Outgoing | None, *, clean: bool = False
) -> BufferedClient:
    """A persistent-session paho client (manual acks, no reconnect of its own), not connected
    (``clean``: a 3.1.1 session the broker forgets; MQTT 5 says so at connect)."""
    s = settings
    client = BufferedClient(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=paho.MQTTv5 if s.protocol == "5" else paho.MQTTv311,
        clean_session=None if s.protocol == "5" else clean,
        manual_ack=True,
        reconnect_on_failure=False,
    )
    if s.username is not None:
        client.username_pw_set(s.username, s.password)
    if s.tls_ca is not None:
        ctx = ssl.create_default_context(cafile=str(s.tls_ca))
        ctx.sslsocket_class = _ClosingSSLSocket
        if s.tls_cert is not None:
            ctx.load_cert_chain(str(s.tls_cert), str(s.tls_key) if s.tls_key else None)
        client.tls_set_context(ctx)
    # paho reports socket errors only through its logger; without this a broker that
    # refuses our TLS client certificate shows up only as "Unspecified error".
    client.enable_logger(log.getChild("paho"))
    if will is not None:
        client.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
    return client


def publish_properties(msg: Outgoing) -> Properties | None:
    """``msg``'s MQTT 5 properties (correlation, content type, user), or None if it has none."""
    if msg.correlation_data is None and msg.content_type is None and not msg.user_properties:
        return None
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if msg.correlation_data is not None:
        props.CorrelationData = msg.correlation_data
    if msg.content_type is not None:
        props.ContentType = msg.content_type
    if msg.user_properties:
        props.UserProperty = list(msg.user_properties)
    return props


def incoming(message: paho.MQTTMessage, generation: int, v5: bool) -> Incoming:
    """paho's ``message`` as the bridge sees it, stamped with its connection's generation."""
    props = message.properties if v5 else None
    user: dict[str, str] = {}
    for key, value in getattr(props, "UserProperty", None) or []:
        user[str(key)] = str(value)
    expiry = getattr(props, "MessageExpiryInterval", None)
    try:
        topic = message.topic
    except UnicodeDecodeError:
        topic = ""
    return Incoming(
        topic=topic,
        payload=bytes(message.payload),
        qos=message.qos,
        dup=bool(message.dup),
        mid=message.mid,
        generation=generation,
        received=time.monotonic(),
        response_topic=getattr(props, "ResponseTopic", None),
        correlation_data=getattr(props, "CorrelationData", None),
        content_type=getattr(props, "ContentType", None),
        expiry_s=int(expiry) if expiry is not None else None,
        user_properties=user,
        retain=bool(message.retain),
    )

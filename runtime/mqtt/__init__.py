"""The MQTT bridge (paho-mqtt 2.x driven by the asyncio loop); see `bridge.MqttBridge`."""

from wasmgate.runtime.mqtt.bridge import Channel, MqttBridge
from wasmgate.runtime.mqtt.state import BridgeState

__all__ = ["BridgeState", "Channel", "MqttBridge"]

"""The MQTT bridge (paho-mqtt 2.x driven by the asyncio loop); see `bridge.MqttBridge`."""

from wasmgate.runtime.mqtt.bridge import BridgeState, MqttBridge, status_for

__all__ = ["BridgeState", "MqttBridge", "status_for"]

"""The MQTT bridge (paho-mqtt 2.x driven by the asyncio loop); see `bridge.MqttBridge`."""

from wasmgate.runtime.mqtt.bridge import BridgeState, Channel, MqttBridge

__all__ = ["BridgeState", "Channel", "MqttBridge"]

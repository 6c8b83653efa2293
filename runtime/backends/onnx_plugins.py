"""Plugin EPs: register a profile's EP libraries, enumerate their devices, pick some.

ONNX Runtime keeps registered libraries for the process's life and refuses a second
registration under the same name, so "already registered" is success here. What was found
is said in the model's notes either way: a plugin that registered but offers no device of
the wanted type (the OpenVINO plugin skips non-Intel CPUs) is a visible fallback, never a
silent CPU run; one that cannot load at all names the library and ONNX Runtime's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnxruntime as ort

from wasmgate.device_profiles.ort import OnnxRuntimeSettings
from wasmgate.device_profiles.ort_plugins import PluginEp

# Devices (`OrtEpDevice`) are pybind objects without stubs: Any.
EpDevice = Any


@dataclass
class PluginChoice:
    """Devices chosen per plugin (with their options) and the policy, applied to a session's
    options; ``names`` are the EPs it brings, for the report after the session exists."""

    devices: list[tuple[list[EpDevice], dict[str, str]]] = field(default_factory=list)
    policy: str | None = None
    names: list[str] = field(default_factory=list)

    def apply(self, so: ort.SessionOptions) -> None:
        for devices, options in self.devices:
            so.add_provider_for_devices(devices, options)
        if not self.devices and self.policy is not None:
            so.set_provider_selection_policy(
                getattr(ort.OrtExecutionProviderDevicePolicy, self.policy)
            )

    @property
    def active(self) -> bool:
        return bool(self.devices) or self.policy is not None


def choose_plugins(settings: OnnxRuntimeSettings, notes: list[str]) -> PluginChoice | None:
    """Register each plugin and choose its devices; None when the profile names none."""
    if not settings.plugins and settings.selection_policy is None:
        return None
    choice = PluginChoice(policy=settings.selection_policy)
    if not hasattr(ort, "register_execution_provider_library"):
        notes.append(
            f"plugin EPs need ONNX Runtime >= 1.22 (this is {ort.__version__}); "
            f"{', '.join(p.ep_name for p in settings.plugins) or 'selection_policy'} skipped"
        )
        return None
    for plugin in settings.plugins:
        if register(plugin, notes):
            picked = pick_devices(plugin, ort.get_ep_devices(), notes)
            if picked:
                choice.devices.append((picked, dict(plugin.options)))
                choice.names.append(plugin.ep_name)
    if choice.policy is not None and not choice.devices:
        notes.append(f"device selection by ONNX Runtime's policy {choice.policy}")
    return choice if choice.active else None


def library_path(plugin: PluginEp) -> str:
    """The library file: the profile's path, or what the package says it ships."""
    if plugin.library:
        return plugin.library
    import importlib  # noqa: PLC0415 - only a profile with a plugin package needs it

    module = importlib.import_module(plugin.package)
    path: str = module.get_library_path()
    return path


def register(plugin: PluginEp, notes: list[str]) -> bool:
    """Register ``plugin``'s library under its EP name; False (with a note) if it cannot."""
    try:
        path = library_path(plugin)
    except Exception as e:
        notes.append(
            f"plugin {plugin.ep_name}: package {plugin.package} unusable ({e}); "
            f"install it: pip install {plugin.package.replace('_', '-')}"
        )
        return False
    try:
        ort.register_execution_provider_library(plugin.ep_name, path)
    except Exception as e:
        if "already registered" not in str(e):
            notes.append(f"plugin {plugin.ep_name}: {path} did not register: {e}")
            return False
    return True


def pick_devices(plugin: PluginEp, devices: Sequence[EpDevice], notes: list[str]) -> list[EpDevice]:
    """The plugin's devices of the first wanted type (any type when none is named) and
    vendor; a note says what was offered when none fits."""
    offered = [d for d in devices if d.ep_name == plugin.ep_name]
    fit = [d for d in offered if _vendor_ok(plugin, d)]
    wanted_types: list[str | None] = [*plugin.device_types] or [None]
    for wanted in wanted_types:
        chosen = [d for d in fit if wanted is None or d.device.type.name == wanted]
        if chosen:
            notes.append(f"plugin {plugin.ep_name}: {describe(chosen[0])}")
            return chosen[:1]
    if not offered:
        notes.append(
            f"plugin {plugin.ep_name} registered, no device: the library offers none on this "
            "machine (its factory skips hardware it cannot drive); running on the providers list"
        )
    else:
        notes.append(
            f"plugin {plugin.ep_name} registered, no device of type "
            f"{'/'.join(plugin.device_types) or 'any'}"
            f"{' from ' + plugin.vendor if plugin.vendor else ''}; offered: "
            f"{', '.join(describe(d) for d in offered)}"
        )
    return []


def describe(device: EpDevice) -> str:
    """One device as an operator reads it: ``CPU (Intel, vendor 0x8086, device 0)``."""
    hw = device.device
    return f"{hw.type.name} ({hw.vendor}, vendor {hw.vendor_id:#06x}, device {hw.device_id})"


def _vendor_ok(plugin: PluginEp, device: EpDevice) -> bool:
    if not plugin.vendor:
        return True
    want = plugin.vendor.lower()
    return want in (device.device.vendor.lower(), device.ep_vendor.lower())

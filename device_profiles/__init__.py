"""wasmgate.device_profiles: TOML profiles per hardware kind, their schema, and detection.

Imports only msgspec, the root module `wasmgate.typed` and the standard library (never
`wasmgate.runtime`).
"""

from wasmgate.device_profiles.detect import Detection, HostFacts, detect, read_facts
from wasmgate.device_profiles.errors import (
    DetectionError,
    InvalidProfile,
    ProfileError,
    ProfileNotFound,
)
from wasmgate.device_profiles.loader import list_profiles, load_all, load_profile, parse_profile
from wasmgate.device_profiles.schema import DeviceProfile, Precision

__all__ = [
    "Detection",
    "DetectionError",
    "DeviceProfile",
    "HostFacts",
    "InvalidProfile",
    "Precision",
    "ProfileError",
    "ProfileNotFound",
    "detect",
    "list_profiles",
    "load_all",
    "load_profile",
    "parse_profile",
    "read_facts",
]

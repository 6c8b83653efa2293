from __future__ import annotations

import numpy as np
import pytest

from wasmgate.device_profiles import DeviceProfile, load_profile, parse_profile
from wasmgate.runtime.backends import HostInfo

X86 = HostInfo(machine="x86_64", system="Linux", cpu_flags=frozenset({"avx2", "sse4_2"}))
GRAVITON = HostInfo(
    machine="aarch64", system="Linux", cpu_flags=frozenset({"asimd", "asimddp", "i8mm", "bf16"})
)


@pytest.fixture
def cpu_profile() -> DeviceProfile:
    return load_profile("generic-x86_64")


@pytest.fixture
def batch() -> np.ndarray:
    return np.random.default_rng(3).uniform(-2, 2, (5, 16)).astype(np.float32)


def profile_text(providers: str, extra: str = "", precision: str = '["int8", "fp32"]') -> str:
    return f"""
name = "test"
description = "test profile"
precision = {precision}
[cpu]
arch = "x86_64"
[onnxruntime]
providers = {providers}
{extra}
"""


def make_profile(providers: str, extra: str = "") -> DeviceProfile:
    return parse_profile(profile_text(providers, extra))

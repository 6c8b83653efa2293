"""A bundle's guest limits per request: built once per engine ceilings, the request's time
left applied on top, and a ceilings reload (SIGHUP) seen by the very next request."""

from __future__ import annotations

from pathlib import Path

from wasmgate.runtime.bundles.loader import _GuestLimits
from wasmgate.sandbox import Ceilings, GuestLimits, SandboxEngine
from wasmgate.signing.manifest import Limits

MIB = 1 << 20


def test_time_left_lowers_the_deadline_and_a_reload_is_seen(tmp_path: Path) -> None:
    with SandboxEngine(tmp_path / "modules", Ceilings(memory_bytes=64 * MIB)) as engine:
        limits = _GuestLimits(Limits(memory_mb=32, deadline_ms=2000), engine)
        first = limits(None)
        assert (first.memory_bytes, first.deadline_s) == (32 * MIB, 2.0)
        assert limits(None) is first  # built once, not per request
        assert limits(0.25).deadline_s == 0.25  # the request's time left, when sooner
        assert limits(30.0).deadline_s == 2.0
        engine.apply_ceilings(Ceilings(memory_bytes=16 * MIB, deadline_s=1.0))
        after = limits(None)
        assert (after.memory_bytes, after.deadline_s) == (16 * MIB, 1.0)
        assert limits(0.5).deadline_s == 0.5


def test_within_never_raises_a_deadline() -> None:
    base = GuestLimits(deadline_s=1.0)
    assert base.within(None) is base
    assert base.within(5.0) is base
    assert base.within(0.1).deadline_s == 0.1

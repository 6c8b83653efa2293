"""Adapter.run with a real C adapter: host API, isolation, concurrency, pooled mode, cache."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.sandbox.helpers import DeclaredModels
from wasmgate.sandbox import (
    Adapter,
    Ceilings,
    GuestLimits,
    GuestResult,
    SandboxEngine,
    SandboxError,
)
from wasmgate.signing.derived import MAGIC

OUT = struct.Struct("<4fI32s")


@pytest.fixture(scope="module")
def affine(engine: SandboxEngine, guest_wasm: Callable[[str], bytes]) -> Adapter:
    return engine.compile(guest_wasm("affine_adapter"), name="affine")


def call(adapter: Adapter, models: DeclaredModels, xs: list[float], client: str) -> GuestResult:
    meta = {"client": client, "adapter": "affine"}
    return adapter.run(struct.pack("<4f", *xs), meta, models, GuestLimits())


def decode(res: GuestResult) -> tuple[list[float], int, str]:
    *ys, count, client = OUT.unpack(res.output)
    return [float(y) for y in ys], count, client.rstrip(b"\0").decode()


def test_request_through_the_host_api(affine: Adapter, declared: DeclaredModels) -> None:
    res = call(affine, declared, [1, 2, 3, 4], "dev-1")
    assert res.status == 0
    assert decode(res) == ([3.0, 5.0, 7.0, 9.0], 1, "dev-1")
    assert res.fallback_reason is None
    assert res.events == [b"dev-1"]
    assert "stdout: client=dev-1 requests=1" in res.logs
    assert "info: dev-1" in res.logs
    assert res.infer_s > 0
    assert res.instantiate_s > 0
    assert res.run_s >= res.infer_s


def test_fallback_request_and_bad_input(affine: Adapter, declared: DeclaredModels) -> None:
    res = call(affine, declared, [60, 0, 0, 0], "dev-2")
    assert res.fallback_reason == "low confidence"
    bad = affine.run(b"xyz", {}, declared, GuestLimits())
    assert (bad.status, bad.output) == (1, b"payload must be 4 little-endian floats")


def test_unknown_meta_key(affine: Adapter, declared: DeclaredModels) -> None:
    res = affine.run(struct.pack("<4f", 0, 0, 0, 0), {}, declared, GuestLimits())
    assert decode(res)[2] == "anon"


def test_missing_model_is_adapter_error(affine: Adapter) -> None:
    res = affine.run(struct.pack("<4f", 0, 0, 0, 0), {}, DeclaredModels({}), GuestLimits())
    assert (res.status, res.output) == (2, b"wasi-nn failed")
    assert any("no model named 'affine'" in line for line in res.logs)


def test_concurrent_requests_are_correct_and_isolated(
    affine: Adapter, declared: DeclaredModels
) -> None:
    def one(i: int) -> None:
        xs = [float(i), float(i + 1), -float(i), 0.5]
        res = call(affine, declared, xs, f"c{i}")
        ys, count, client = decode(res)
        assert ys == [x * 2 + 1 for x in xs]
        assert (count, client) == (1, f"c{i}")  # a fresh instance: no state from others
        assert res.logs == [f"stdout: client=c{i} requests=1", f"info: c{i}"]
        assert res.events == [f"c{i}".encode()]

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(200)))


def test_pooled_mode_reuses_the_instance_per_thread(
    affine: Adapter, declared: DeclaredModels
) -> None:
    pooled = affine.with_mode("pooled")
    counts = [decode(call(pooled, declared, [0, 0, 0, 0], "p"))[1] for _ in range(3)]
    assert counts == [1, 2, 3]
    assert decode(call(affine, declared, [0, 0, 0, 0], "f"))[1] == 1
    with pytest.raises(ValueError, match="fresh"):
        affine.with_mode("shared")


def test_model_calls_are_counted_per_run_in_both_modes(
    affine: Adapter, declared: DeclaredModels
) -> None:
    """Each result counts its own run's model calls: a pooled instance (one session for many
    requests) must not carry the last request's count into the next, nor change a result
    already returned."""
    pooled = affine.with_mode("pooled")
    results = [call(pooled, declared, [0, 0, 0, 0], "p") for _ in range(3)]
    assert [dict(r.model_calls) for r in results] == [{"affine": 1}] * 3
    assert dict(call(affine, declared, [0, 0, 0, 0], "f").model_calls) == {"affine": 1}
    bad = affine.run(b"xyz", {}, declared, GuestLimits())  # refused before any model call
    assert dict(bad.model_calls) == {}


def test_pooled_instance_is_dropped_after_a_failure(
    engine: SandboxEngine, wat_guest: Callable[[str], bytes]
) -> None:
    from wasmgate.sandbox import GuestTrap  # noqa: PLC0415
    from wasmgate.sandbox.adapter import NoModels  # noqa: PLC0415

    evil = engine.compile(wat_guest("evil")).with_mode("pooled")
    assert evil.run(b"\0", {}, NoModels(), GuestLimits()).status == 0
    with pytest.raises(GuestTrap):
        evil.run(b"\x04", {}, NoModels(), GuestLimits())
    assert evil.run(b"\0", {}, NoModels(), GuestLimits()).status == 0


def test_limits_are_capped_by_ceilings() -> None:
    ceilings = Ceilings(memory_bytes=1 << 20, deadline_s=0.5, max_output_bytes=10)
    lim = GuestLimits(memory_bytes=1 << 30, deadline_s=9, max_output_bytes=1 << 20).capped(ceilings)
    assert (lim.memory_bytes, lim.deadline_s, lim.max_output_bytes) == (1 << 20, 0.5, 10)


def test_fuel_needs_a_fuel_engine(affine: Adapter, declared: DeclaredModels) -> None:
    with pytest.raises(SandboxError, match="fuel"):
        affine.run(b"", {}, declared, GuestLimits(fuel=10))


def test_precompiled_cache_is_private_and_reused(
    tmp_path: Path, guest_wasm: Callable[[str], bytes]
) -> None:
    wasm = guest_wasm("affine_adapter")
    cache = tmp_path / "cache"
    with SandboxEngine(cache) as eng:
        eng.compile(wasm)
    assert cache.stat().st_mode & 0o777 == 0o700
    (artifact,) = cache.glob("*.cwasm")
    with SandboxEngine(cache) as eng:
        eng.compile(wasm)  # loaded from the artifact
        artifact.write_bytes(b"garbage")  # corrupt: recompiled, not trusted
        eng.compile(wasm)
        entry = artifact.read_bytes()
        assert entry[: len(MAGIC)] == MAGIC  # then the MAC, then wasmtime's ELF image
        assert entry[len(MAGIC) + 32 :][:4] == b"\x7fELF"
    with SandboxEngine(cache, Ceilings(fuel_enabled=True)) as eng:
        eng.compile(wasm)  # other settings: another key
    assert len(list(cache.glob("*.cwasm"))) == 2


def test_cache_dir_permissions_are_tightened(tmp_path: Path) -> None:
    cache = tmp_path / "open"
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)  # noqa: PTH101, S103 - the test needs an open directory
    with SandboxEngine(cache):
        assert cache.stat().st_mode & 0o777 == 0o700


def test_closed_engine_refuses_to_compile(tmp_path: Path) -> None:
    eng = SandboxEngine(tmp_path / "c")
    eng.close()
    eng.close()
    with pytest.raises(SandboxError, match="closed"):
        eng.compile(b"\0asm\x01\0\0\0")

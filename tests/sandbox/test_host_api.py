"""The `wasmgate` host module: metadata, log and event caps, fallback, output rules."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from wasmgate.sandbox import (
    Adapter,
    GuestLimits,
    GuestResourceExhausted,
    GuestTrap,
    NoModels,
    SandboxEngine,
)


@pytest.fixture(scope="module")
def host(engine: SandboxEngine, wat_guest: Callable[[str], bytes]) -> Adapter:
    return engine.compile(wat_guest("hostapi"), name="hostapi")


def test_meta_ok_too_small_and_unknown(host: Adapter) -> None:
    meta = {"adapter": "vision", "param.threshold": "0.75"}
    res = host.run(b"\x01", meta, NoModels(), GuestLimits())
    rc1, n1, rc2, n2, rc3, _ = struct.unpack("<6I", res.output)
    assert (rc1, n1) == (0, 6)
    assert (rc2, n2) == (2, 4)  # buffer of 2 too small: needed size written
    assert rc3 == 1  # unknown key


def test_log_is_capped(host: Adapter) -> None:
    res = host.run(b"\x02", {}, NoModels(), GuestLimits(max_log_bytes=1000))
    assert sum(len(line) for line in res.logs) <= 1000 + 100
    assert res.logs[0] == "warn: 0123456789abcdef0123456789abcdef"
    assert res.logs[-1].endswith("[log truncated]")


def test_events_are_capped(host: Adapter) -> None:
    res = host.run(b"\x03", {}, NoModels(), GuestLimits(max_events=5))
    assert len(res.events) == 5
    assert struct.unpack("<I", res.output)[0] == 3 + 95  # mode byte + 95 refusals


def test_fallback_request_with_adapter_error(host: Adapter) -> None:
    res = host.run(b"\x04", {}, NoModels(), GuestLimits())
    assert (res.status, res.output, res.fallback_reason) == (2, b"012", "0123456789")


def test_refused_output_can_be_replaced(host: Adapter) -> None:
    res = host.run(b"\x05", {}, NoModels(), GuestLimits(max_output_bytes=100))
    assert (res.status, res.output) == (0, b"0123")
    assert any("60000 bytes refused" in line for line in res.logs)


def test_unterminated_stdout_line_is_flushed(host: Adapter) -> None:
    assert host.run(b"\x06", {}, NoModels(), GuestLimits()).logs == ["stdout: 01234"]


def test_bad_pointer_in_log_fails_the_request(host: Adapter) -> None:
    with pytest.raises(GuestTrap, match=r"wasmgate\.log") as info:
        host.run(b"\x07", {}, NoModels(), GuestLimits())
    assert info.value.cause == "oob"


def test_alloc_pointer_off_the_end(host: Adapter) -> None:
    with pytest.raises(GuestTrap, match="bad pointer") as info:
        host.run(b"\0" * 60001, {}, NoModels(), GuestLimits())
    assert info.value.cause == "oob"


def test_alloc_failure_is_memory_exhaustion(engine: SandboxEngine) -> None:
    import wasmtime  # noqa: PLC0415

    wasm = wasmtime.wat2wasm("""(module (memory (export "memory") 1)
      (func (export "wasmgate_abi_version") (result i32) (i32.const 1))
      (func (export "wasmgate_alloc") (param i32) (result i32) (i32.const 0))
      (func (export "wasmgate_handle") (param i32 i32) (result i32) (i32.const 0)))""")
    adapter = engine.compile(bytes(wasm))
    with pytest.raises(GuestResourceExhausted, match="wasmgate_alloc"):
        adapter.run(b"abc", {}, NoModels(), GuestLimits())
    assert adapter.run(b"", {}, NoModels(), GuestLimits()).status == 0

"""The malicious-guest catalogue: each attack is stopped within its deadline (plus a margin)
with an error naming the cause, the host stays alive, and the next request succeeds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import wasmtime

from tests.sandbox.helpers import DeclaredModels
from wasmgate.sandbox import (
    Adapter,
    AdapterLoadError,
    Ceilings,
    GuestDeadlineExceeded,
    GuestLimits,
    GuestOutputTooLarge,
    GuestResourceExhausted,
    GuestTrap,
    SandboxEngine,
)
from wasmgate.sandbox.adapter import NoModels

DEADLINE = 0.2
MARGIN = 1.0  # generous: the test VM is shared and noisy; the epoch tick is 5 ms
LIMITS = GuestLimits(deadline_s=DEADLINE, memory_bytes=16 * 1024 * 1024)


@pytest.fixture(scope="module")
def evil(engine: SandboxEngine, wat_guest: Callable[[str], bytes]) -> Adapter:
    return engine.compile(wat_guest("evil"), name="evil")


@pytest.fixture
def healthy(evil: Adapter) -> Iterator[None]:
    """After each attack, the same adapter serves a normal request."""
    yield
    res = evil.run(b"\0hello", {}, NoModels(), LIMITS)
    assert (res.status, res.output) == (0, b"\0hello")


def attack(evil: Adapter, mode: int, limits: GuestLimits = LIMITS) -> tuple[GuestTrap, float]:
    start = time.monotonic()
    with pytest.raises(GuestTrap) as info:
        evil.run(bytes([mode]), {}, NoModels(), limits)
    elapsed = time.monotonic() - start
    assert elapsed < limits.deadline_s + MARGIN
    return info.value, elapsed


@pytest.mark.usefixtures("healthy")
@pytest.mark.parametrize(
    ("mode", "kind", "cause", "words"),
    [
        (1, GuestDeadlineExceeded, "deadline", "deadline of 200 ms (limits.deadline_ms)"),
        (2, GuestResourceExhausted, "memory", "limit of 16777216 bytes (limits.memory_mb)"),
        (3, GuestTrap, "stack", "call stack exhausted"),
        (4, GuestTrap, "unreachable", "unreachable"),
        (5, GuestTrap, "exit", "proc_exit(3)"),
        (6, GuestDeadlineExceeded, "deadline", "slept in poll_oneoff"),
        (9, GuestOutputTooLarge, "output", "bytes (limits.max_output_bytes)"),
        (10, GuestTrap, "oob", "wasmgate.set_output"),
        (11, GuestTrap, "abi", "unknown status 7"),
        (12, GuestDeadlineExceeded, "deadline", "deadline"),
        (13, GuestTrap, "oob", "out-of-bounds memory access"),
        (14, GuestDeadlineExceeded, "deadline", "slept in poll_oneoff"),
        (15, GuestTrap, "host", "a host call failed"),
    ],
)
def test_attack_is_stopped_with_its_cause(
    evil: Adapter, mode: int, kind: type[GuestTrap], cause: str, words: str
) -> None:
    err, _ = attack(evil, mode)
    assert type(err) is kind
    assert err.cause == cause
    assert words in str(err)


def test_proc_exit_reports_code(evil: Adapter) -> None:
    err, _ = attack(evil, 5)
    assert err.exit_code == 3


def test_sleep_is_cut_at_the_deadline(evil: Adapter) -> None:
    _, elapsed = attack(evil, 6)
    assert elapsed >= DEADLINE  # it did sleep, but not the 10 s it asked for


@pytest.mark.usefixtures("healthy")
def test_filesystem_is_not_reachable(evil: Adapter) -> None:
    res = evil.run(b"\x07", {}, NoModels(), LIMITS)
    assert res.output == (8).to_bytes(4, "little") * 2  # EBADF: there is no preopened dir


@pytest.mark.usefixtures("healthy")
def test_sockets_are_not_supported(evil: Adapter) -> None:
    res = evil.run(b"\x08", {}, NoModels(), LIMITS)
    assert res.output == (58).to_bytes(4, "little") * 2  # ENOTSUP


def test_fuel_budget(tmp_path: Path, wat_guest: Callable[[str], bytes]) -> None:
    with SandboxEngine(tmp_path / "c", Ceilings(fuel_enabled=True)) as eng:
        adapter = eng.compile(wat_guest("evil"))
        with pytest.raises(GuestResourceExhausted, match="fuel") as info:
            adapter.run(b"\x01", {}, NoModels(), GuestLimits(fuel=1_000_000))
        assert info.value.cause == "fuel"
        assert adapter.run(b"\0", {}, NoModels(), GuestLimits(fuel=1_000_000)).status == 0


ABI = """
  (memory (export "memory") {pages})
  (func (export "wasmgate_abi_version") (result i32) (i32.const 1))
  (func (export "wasmgate_alloc") (param i32) (result i32) (i32.const 16))
  (func (export "wasmgate_handle") (param i32 i32) (result i32) (i32.const 0))
"""


def module(body: str = "", pages: int = 1) -> bytes:
    return bytes(wasmtime.wat2wasm(f"(module {body} {ABI.format(pages=pages)})"))


def test_infinite_initialize_is_stopped_each_time(engine: SandboxEngine) -> None:
    adapter = engine.compile(module('(func (export "_initialize") (loop $l (br $l)))'))
    for _ in range(2):
        start = time.monotonic()
        with pytest.raises(GuestDeadlineExceeded):
            adapter.run(b"x", {}, NoModels(), LIMITS)
        assert time.monotonic() - start < DEADLINE + MARGIN


def test_infinite_start_function_fails_at_load(engine: SandboxEngine) -> None:
    start = time.monotonic()
    with pytest.raises(AdapterLoadError, match="deadline"):
        engine.compile(module("(func $s (loop $l (br $l))) (start $s)"), name="spin")
    assert time.monotonic() - start < 1.0 + MARGIN


def test_initial_memory_above_request_limit(engine: SandboxEngine) -> None:
    adapter = engine.compile(module(pages=512))  # 32 MiB: fits the ceiling, not the request
    with pytest.raises(GuestResourceExhausted, match="initial memory") as info:
        adapter.run(b"", {}, NoModels(), LIMITS)
    assert info.value.cause == "memory"
    assert adapter.run(b"", {}, NoModels(), GuestLimits()).status == 0


def test_initial_table_above_request_limit(engine: SandboxEngine) -> None:
    adapter = engine.compile(module("(table 50000 funcref)"))
    with pytest.raises(GuestResourceExhausted, match="table") as info:
        adapter.run(b"", {}, NoModels(), LIMITS)
    assert info.value.cause == "table"


@pytest.mark.parametrize(
    ("wasm", "words"),
    [
        (lambda: module(pages=8192), "8192 pages exceeds the ceiling of 268435456 bytes (limits.m"),
        (lambda: module('(table 200000 funcref) (export "t" (table 0))'), "initial table"),
        (lambda: module('(import "env" "system" (func))'), "unknown import `env::system`"),
        (
            lambda: module('(import "wasi_ephemeral_nn" "set_input_by_name" (func))'),
            "unsupported wasi-nn extension",
        ),
        (
            lambda: module('(import "wasmgate" "log" (func (param i32)))'),
            "cannot link",
        ),
        (lambda: b"\0asm\x01\0\0\0\x05garbage", "invalid wasm module"),
        (lambda: b"(module)", "not a wasm binary"),
        (lambda: b"\0asm\x0d\0\x01\0", "components are not supported"),
        (lambda: b"\0asm\x01\0\0\0" + b"\0" * (50 * 1024 * 1024), "(limits.max_module_bytes)"),
        (
            lambda: bytes(wasmtime.wat2wasm('(module (memory (export "memory") 1))')),
            "missing export `wasmgate_abi_version`",
        ),
        (
            lambda: bytes(wasmtime.wat2wasm("(module)")),
            "missing export `memory`",
        ),
        (
            lambda: module().replace(b"wasmgate_alloc", b"wasmgate_alloX"),
            "missing export `wasmgate_alloc`",
        ),
    ],
)
def test_bad_modules_fail_at_load_naming_the_problem(
    engine: SandboxEngine, wasm: Callable[[], bytes], words: str
) -> None:
    with pytest.raises(AdapterLoadError, match=words.replace("(", r"\(").replace(")", r"\)")):
        engine.compile(wasm(), name="bad")


def test_wrong_abi_version(engine: SandboxEngine) -> None:
    body = ABI.format(pages=1).replace("(result i32) (i32.const 1)", "(result i32) (i32.const 2)")
    with pytest.raises(AdapterLoadError, match="wasmgate_abi_version\\(\\) is 2"):
        engine.compile(bytes(wasmtime.wat2wasm(f"(module {body})")))


def test_sha256_must_match(engine: SandboxEngine) -> None:
    with pytest.raises(AdapterLoadError, match="sha256 mismatch"):
        engine.compile(module(), "0" * 64)


def test_wasi_nn_abuse_returns_errnos_and_next_request_works(
    proxy: Adapter, declared: DeclaredModels
) -> None:
    from tests.sandbox.helpers import Script  # noqa: PLC0415

    s = Script()
    s.call("compute", 12345)  # handle from nowhere
    s.call("load_by_name", s.blob(b"affine"), 6, s.out())
    s.call("init_execution_context", 0, s.out())  # context 0 exists: the dims are checked
    s.call("set_input", 0, 0, s.tensor([0xFFFF_FFFF] * 8, 1, b"\0" * 16))  # huge rank-8 dims
    s.call("set_input", 0, 0, s.tensor([0xFFFF_FFFF, 4], 1, b"\0" * 16))  # huge batch
    s.call("load_by_name", 0xFFFF_0000, 0x7FFF_FFFF, s.out())  # huge name length
    res = proxy.run(s.payload(), {}, declared, GuestLimits(deadline_s=DEADLINE))
    assert s.result(res.output).errnos == [1, 0, 0, 1, 1, 1]
    logs = "\n".join(res.logs)
    assert "do not fit model shape" in logs, logs  # refused by the dims check itself
    assert f"dims need {0xFFFF_FFFF * 16}" in logs, logs
    s2 = Script()
    s2.call("load_by_name", s2.blob(b"affine"), 6, s2.out())
    res = proxy.run(s2.payload(), {}, declared, GuestLimits(deadline_s=DEADLINE))
    assert s2.result(res.output).errnos == [0]


def test_concurrent_attacks_do_not_disturb_each_other_or_good_requests(evil: Adapter) -> None:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    expected = {0: None, 1: "deadline", 3: "stack", 4: "unreachable", 5: "exit", 13: "oob"}

    def one(i: int) -> None:
        mode = list(expected)[i % len(expected)]
        payload = bytes([mode, i % 256])
        cause, output = None, b""
        try:
            output = evil.run(payload, {}, NoModels(), LIMITS).output
        except GuestTrap as e:
            cause = e.cause
        assert cause == expected[mode]
        assert output == (payload if cause is None else b"")

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(one, range(60)))

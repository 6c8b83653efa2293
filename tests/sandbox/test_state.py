"""Adapter state through the real sandbox: ``wasmgate.state_*`` as a guest sees them.

The store is the daemon's (`wasmgate.runtime.bundles.kv.StateDb`, SQLite); the guest is
``guests/state_probe.c`` built with the SDK, so every code asserted here is the one an
adapter author's ``wg_state_*`` call returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wasmgate.runtime.bundles.kv import StateDb
from wasmgate.sandbox import Adapter, GuestLimits, NoModels, SandboxEngine
from wasmgate.sandbox.state import AdapterState, StateErrno

E = StateErrno


class Clock:
    """A settable wall clock, so TTL tests never sleep."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def probe(engine: SandboxEngine, guest_wasm: Callable[[str], bytes]) -> Adapter:
    return engine.compile(guest_wasm("state_probe"), name="state_probe")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db(tmp_path: Path, clock: Clock) -> Iterator[StateDb]:
    with StateDb(tmp_path / "state.sqlite3", clock=clock) as store:
        yield store


def run(probe: Adapter, state: AdapterState | None, *commands: str) -> list[str]:
    res = probe.run("\n".join(commands).encode(), {}, NoModels(), GuestLimits(), state=state)
    assert res.status == 0, res.output
    return res.output.decode().splitlines()


def test_set_get_delete_round_trip(probe: Adapter, db: StateDb) -> None:
    st = db.tenant("a", 4096, 16)
    got = run(probe, st, "get k", "set k hello 0", "get k", "small k", "del k", "get k", "del k")
    assert got == [f"{E.NOT_FOUND} ", "0", "0 hello", f"{E.BUFFER_TOO_SMALL} 5", "0",
                   f"{E.NOT_FOUND} ", f"{E.NOT_FOUND}"]  # fmt: skip


def test_without_a_grant_every_call_is_refused(probe: Adapter) -> None:
    res = probe.run(b"set k v 0\nget k\ndel k", {}, NoModels(), GuestLimits())
    assert res.output.decode().splitlines() == [f"{E.NOT_GRANTED}", f"{E.NOT_GRANTED} ",
                                                f"{E.NOT_GRANTED}"]  # fmt: skip
    assert any("not granted" in line or "grants no [state]" in line for line in res.logs)


def test_key_length_limits(probe: Adapter, db: StateDb) -> None:
    st = db.tenant("a", 65536, 16)
    got = run(probe, st, "set - v 0", "set #257 v 0", "set #256 v 0", "get #256", "get #257")
    assert got == [f"{E.KEY_TOO_LONG}", f"{E.KEY_TOO_LONG}", "0", "0 v", f"{E.KEY_TOO_LONG} "]


def test_value_too_big_refuses_and_changes_nothing(probe: Adapter, db: StateDb) -> None:
    st = db.tenant("a", 100, 16)
    got = run(probe, st, "big huge 101", "set a 0123456789 0", "big b 90", "big a 100", "get a")
    # 101 > max_bytes alone; b would bring the total to 11 + 91; a new a of 1 + 100 too
    assert got == [f"{E.VALUE_TOO_BIG}", "0", f"{E.VALUE_TOO_BIG}", f"{E.VALUE_TOO_BIG}",
                   "0 0123456789"]  # fmt: skip
    assert db.usage("a") == (1, 11)


def test_too_many_keys_but_replacing_is_fine(probe: Adapter, db: StateDb) -> None:
    st = db.tenant("a", 4096, 2)
    got = run(probe, st, "set a 1 0", "set b 2 0", "set c 3 0", "set a 9 0", "get a", "get c")
    assert got == ["0", "0", f"{E.TOO_MANY_KEYS}", "0", "0 9", f"{E.NOT_FOUND} "]


def test_ttl_expiry_hides_the_entry_and_frees_its_slot(
    probe: Adapter, db: StateDb, clock: Clock
) -> None:
    st = db.tenant("a", 4096, 1)
    assert run(probe, st, "set t soon 1500", "get t") == ["0", "0 soon"]
    clock.now += 1.0
    assert run(probe, st, "get t") == ["0 soon"]
    clock.now += 1.0
    assert run(probe, st, "get t", "del t") == [f"{E.NOT_FOUND} ", f"{E.NOT_FOUND}"]
    assert run(probe, st, "set other v 0") == ["0"]  # the expired entry no longer counts
    assert db.usage("a") == (1, 6)
    clock.now += 10**6
    assert run(probe, st, "get other") == ["0 v"]  # no TTL: kept


def test_state_persists_across_reopen(probe: Adapter, tmp_path: Path) -> None:
    path = tmp_path / "kept.sqlite3"
    with StateDb(path) as first:
        assert run(probe, first.tenant("a", 4096, 4), "set k kept 0") == ["0"]
    with StateDb(path) as second:
        assert run(probe, second.tenant("a", 4096, 4), "get k") == ["0 kept"]


def test_two_tenants_at_once_never_see_each_other(
    engine: SandboxEngine, guest_wasm: Callable[[str], bytes], db: StateDb
) -> None:
    wasm = guest_wasm("state_probe")
    tenants = {n: (engine.compile(wasm, name=n), db.tenant(n, 4096, 4)) for n in ("a", "b")}
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def hammer(name: str) -> None:
        adapter, st = tenants[name]
        for i in range(40):
            seen[name] += run(adapter, st, f"set shared {name}{i} 0", "get shared", "get only-a")

    threads = [threading.Thread(target=hammer, args=(n,)) for n in tenants]
    run(tenants["a"][0], tenants["a"][1], "set only-a secret 0")
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for name in ("a", "b"):
        gets = seen[name][1::3]
        assert gets == [f"0 {name}{i}" for i in range(40)]  # always its own last write
    assert set(seen["a"][2::3]) == {"0 secret"}
    assert set(seen["b"][2::3]) == {f"{E.NOT_FOUND} "}  # b can never read a's key
    assert run(tenants["b"][0], tenants["b"][1], "del only-a") == [f"{E.NOT_FOUND}"]


def test_moving_average_helper(probe: Adapter, db: StateDb) -> None:
    st = db.tenant("a", 4096, 4)
    got = run(probe, st, "avg m 1 3", "avg m 2 3", "avg m 3 3", "avg m 7 3")
    assert got == ["0 1 1", "0 1.5 2", "0 2 3", "0 4 3"]
    # Without a grant the helper still answers: the reading alone, and says why.
    res = probe.run(b"avg m 5 3", {}, NoModels(), GuestLimits())
    assert res.output.decode().splitlines() == [f"{E.NOT_GRANTED} 5 1"]


def test_a_failing_store_is_an_error_code_not_a_trap(probe: Adapter, tmp_path: Path) -> None:
    store = StateDb(tmp_path / "closed.sqlite3")
    st = store.tenant("a", 4096, 4)
    store.close()
    assert run(probe, st, "set k v 0", "get k", "del k") == [f"{E.FAILED}", f"{E.FAILED} ",
                                                             f"{E.FAILED}"]  # fmt: skip

"""Sandbox fixtures: one engine per session, compiled test guests, tiny ONNX models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import wasmtime

from tests.sandbox.helpers import GUESTS, DeclaredModels, model_bytes
from wasmgate.sandbox import Adapter, Ceilings, SandboxEngine


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxEngine]:
    """One engine (5 ms epoch tick) with a private cache, like the daemon's."""
    with SandboxEngine(tmp_path_factory.mktemp("sandbox") / "cache", Ceilings()) as eng:
        yield eng


@pytest.fixture(scope="session")
def guest_wasm(zig_cc: Callable[..., Path]) -> Callable[[str], bytes]:
    """``guest_wasm("nn_proxy")`` -> bytes of tests/sandbox/guests/nn_proxy.c compiled."""

    def build(name: str) -> bytes:
        return zig_cc([GUESTS / f"{name}.c"]).read_bytes()

    return build


@pytest.fixture(scope="session")
def wat_guest() -> Callable[[str], bytes]:
    """``wat_guest("loops")`` -> bytes of tests/sandbox/guests/loops.wat."""
    return lambda name: bytes(wasmtime.wat2wasm((GUESTS / f"{name}.wat").read_text()))


@pytest.fixture(scope="session")
def proxy(engine: SandboxEngine, guest_wasm: Callable[[str], bytes]) -> Adapter:
    """The nn_proxy adapter (replays scripted wasi-nn calls)."""
    return engine.compile(guest_wasm("nn_proxy"), name="nn_proxy")


@pytest.fixture(scope="session")
def declared() -> DeclaredModels:
    """Real ORT sessions for every test model, by name; bytes accepted only if declared."""
    return DeclaredModels(model_bytes())

"""The fence around wasmtime-py internals refuses an unknown wasmtime at engine start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wasmgate.sandbox import SandboxEngine, _wasmtime_private
from wasmgate.sandbox._wasmtime_private import SUPPORTED, check_wasmtime, ffi
from wasmgate.sandbox.errors import SandboxError


def test_the_installed_wasmtime_is_supported() -> None:
    check_wasmtime()


@pytest.mark.parametrize("version", ["49.0.0", "51.0.1", "dev"])
def test_other_versions_are_refused_naming_the_range(version: str) -> None:
    with pytest.raises(SandboxError, match=re.escape(SUPPORTED)):
        check_wasmtime(version)


def test_a_missing_private_name_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(ffi, "wasmtime_func_call_unchecked")
    with pytest.raises(SandboxError, match="missing: wasmtime_func_call_unchecked"):
        check_wasmtime()


def test_engine_start_refuses_an_unsupported_wasmtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_wasmtime_private, "version", lambda _name: "51.0.0")
    with pytest.raises(SandboxError, match=r"wasmtime 51\.0\.0 is not supported"):
        SandboxEngine(tmp_path / "cache")

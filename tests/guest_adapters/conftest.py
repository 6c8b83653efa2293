"""Fixtures for the example-adapter tests: one real sandbox engine per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmgate.sandbox import SandboxEngine


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxEngine]:
    with SandboxEngine(Path(tmp_path_factory.mktemp("engine")) / "modules") as eng:
        yield eng

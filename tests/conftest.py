"""Fixtures every test folder reuses: broker, registry, guest compiler, models, daemons."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.fixtures.zig import compile_c


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a collection in which tests share a node id: pytest-xdist hands out work by
    node id, so all but one of them would silently never run (schemathesis's items under
    pytest 9.2 did: 3 of test_openapi.py's 38 ran)."""
    shared = sorted(node for node, count in Counter(i.nodeid for i in items).items() if count > 1)
    if shared:
        raise pytest.UsageError(
            f"{len(shared)} node ids are shared by several tests, e.g. {shared[0]!r}: "
            "parallel runs would skip them (a pytest/plugin version mismatch?)"
        )


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """A real mosquitto on a free loopback port, stopped after the test."""
    broker = Broker(tmp_path / "mosquitto")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A real OCI registry (docker-registry) on a free loopback port, stopped after the test."""
    reg = Registry(tmp_path / "registry")
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def zig_cc() -> Callable[..., Path]:
    """``compile_c(sources, *, out_name=None, reactor=True, extra=())`` -> cached .wasm path."""
    return compile_c


@pytest.fixture(scope="session")
def models() -> Any:
    """Every generated model and test set (``tests.fixtures.models.ModelFiles``)."""
    from tests.fixtures.models import get_models  # noqa: PLC0415 - heavy, only when asked

    return get_models()


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Start daemons with ``daemon_factory(config=..., extra_args=...)``; all stopped after."""
    started: list[Daemon] = []

    def start(
        config: dict[str, Any] | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> Daemon:
        workdir = tmp_path / (name or f"daemon{len(started)}")
        workdir.mkdir(parents=True, exist_ok=True)
        daemon = Daemon(workdir, config, extra_args, env)
        started.append(daemon)
        daemon.start()
        return daemon

    try:
        yield start
    finally:
        for daemon in started:
            try:
                daemon.stop(timeout=15)
            except Exception:
                daemon.kill()

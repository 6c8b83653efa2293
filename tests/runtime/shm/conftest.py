"""Fixtures of the shared-memory daemon tests: a daemon per module, a client per transport,
regions made and destroyed per test."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tritonclient.utils.shared_memory as shm

from tests.fixtures.daemon import Daemon
from tests.runtime.shm.kit import CAPS, Client, connect, key, start_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    started = start_daemon(tmp_path_factory.mktemp("shm"), CAPS)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(params=["http", "grpc"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(daemon: Daemon, kind: str) -> Iterator[Client]:
    client = connect(daemon, kind)
    try:
        yield client
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.fixture
def regions() -> Iterator[Callable[[str, int], Any]]:
    """Make regions (``make(name, size)``, key ``/wg-test-<pid>-<name>``); all destroyed after."""
    made: list[Any] = []

    def make(name: str, size: int) -> Any:
        handle = shm.create_shared_memory_region(name, key(name), size)
        made.append(handle)
        return handle

    try:
        yield make
    finally:
        for handle in made:
            with contextlib.suppress(Exception):  # the test may have unlinked it itself
                shm.destroy_shared_memory_region(handle)

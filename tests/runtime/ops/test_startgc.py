"""The cyclic collector across a start: off until READY, then the start's objects frozen.

The in-process tests restore the collector's state whatever happens; the daemon test runs
`wasmgate serve` through the command line in a child process, where READY really happens.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import write_config
from tests.fixtures.net import free_port
from wasmgate.runtime.cli import main
from wasmgate.runtime.ops import startgc


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """Whatever a test does, the collector is on and nothing is frozen afterwards."""
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


class Node:
    """A container that can sit in a cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_start_runs_without_the_collector_and_ready_freezes_what_it_made() -> None:
    assert startgc.pause()
    assert not gc.isenabled()
    assert not startgc.pause()  # already off: a second pause owns nothing
    made_at_start = _cycle()
    startgc.serving()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert made_at_start() is not None  # frozen: never walked, so its cycle stays


def test_an_unload_thaws_so_a_frozen_cycle_is_freed() -> None:
    startgc.pause()
    dropped = _cycle()  # e.g. a bundle loaded at start, replaced later
    startgc.serving()
    gc.collect()
    assert dropped() is not None
    startgc.thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert dropped() is None


def test_ready_without_a_pause_changes_nothing() -> None:
    startgc.serving()  # a daemon a test runs in process: the collector was never off
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    startgc.thaw()  # nothing frozen: nothing to do
    assert gc.get_freeze_count() == 0


def test_a_serve_that_fails_before_ready_leaves_the_collector_on(tmp_path: Path) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text("[http]\nport = 'not a port'\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_other_commands_never_pause_the_collector(capsys: pytest.CaptureFixture[str]) -> None:
    gc.disable()  # a caller that turned it off keeps it off: main owns only its own pause
    assert main(["profiles", "list"]) == 0
    assert not gc.isenabled()
    gc.enable()
    assert main(["profiles", "list"]) == 0
    assert gc.isenabled()
    assert capsys.readouterr().out


CHILD = r"""
import gc, os, signal, sys, threading, time
from wasmgate.runtime.cli import main

seen = []

def watch():
    # Off while starting; on, with the start frozen, once READY; then stop the daemon.
    deadline = time.monotonic() + 60
    while gc.isenabled() and time.monotonic() < deadline:  # main() has not paused it yet
        time.sleep(0.001)
    seen.append(("start", gc.isenabled(), gc.get_freeze_count()))
    while not (gc.isenabled() and gc.get_freeze_count()) and time.monotonic() < deadline:
        time.sleep(0.01)
    seen.append(("ready", gc.isenabled(), gc.get_freeze_count() > 1000))
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
code = main(["serve", "--config", sys.argv[1]])
print(seen, code, gc.isenabled(), flush=True)
"""


@pytest.mark.timeout(180)
def test_the_daemon_starts_paused_and_freezes_at_ready(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config.toml",
        {
            "drain_s": 1,
            "paths": {"data_dir": tmp_path / "data"},
            "http": {"host": "127.0.0.1", "port": free_port()},
        },
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(config)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('start', False, 0), ('ready', True, True)] 0 True"

"""docs/deploy.md's "Staged releases" command blocks, run as written against a real daemon.

The blocks are read from the doc (its two blocks without a language under
``### Staged releases``) and typed into one shell (`tests.fixtures.doc_shell.DocShell`) in
a directory holding what the reader has there: ``digits-5.wgb``, signed by a key the
daemon trusts, while ``digits@4`` serves. The reader's own settings come from outside, the
way the doc says: ``$TOKEN`` (the management token) for ``curl``, and for ``wasmgate
release`` the config file's ``http.port`` and ``http.management_token`` as their
documented ``WASMGATE_HTTP__…`` overrides. The daemon listens on a free port, which takes
the place of the doc's 127.0.0.1:8080 in the ``curl`` line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.doc_shell import DocShell, commands, plain_blocks
from tests.runtime.bundlekit import BundleKit
from tests.runtime.bundles.releases import TOKEN, entry, put, start

DOC = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"
HEADING = "### Staged releases"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def daemon(kit: BundleKit, tmp_path: Path, daemon_factory: Callable[..., Daemon]) -> Daemon:
    """Serving ``digits@4``; ``digits-5.wgb`` waits in the reader's directory."""
    daemon = start(daemon_factory, kit, tmp_path)
    assert put(daemon, kit.build("digits", 4))[0] == 201
    (tmp_path / "reader").mkdir()
    kit.build("digits", 5, out_dir=tmp_path / "reader")
    return daemon


@pytest.fixture
def shell(daemon: Daemon, tmp_path: Path) -> Iterator[DocShell]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {
        **os.environ,
        "PATH": path,  # `wasmgate` as the reader's shell finds it
        "TOKEN": TOKEN,
        "WASMGATE_HTTP__PORT": str(daemon.port),
        "WASMGATE_HTTP__MANAGEMENT_TOKEN": TOKEN,
    }
    env.pop("WASMGATE_TOKEN", None)
    shell = DocShell(tmp_path / "reader", env)
    yield shell
    shell.close()


def test_the_blocks_run_as_written(daemon: Daemon, shell: DocShell, kit: BundleKit) -> None:
    curl, cli = plain_blocks(DOC, HEADING)
    for command in commands(curl):
        shell.run(command.replace("127.0.0.1:8080", f"127.0.0.1:{daemon.port}"))
    staged = entry(daemon, "digits")["staged"]
    assert (entry(daemon, "digits")["version"], staged["version"]) == (4, 5)
    assert staged["gates"] == {
        "min_requests": 200, "max_error_share": 0.01, "max_p99_ratio": 1.5, "window_s": 600.0
    }  # fmt: skip
    seen = []
    for command in commands(cli):
        shell.run(command)
        found = entry(daemon, "digits")
        seen.append((found["version"], found.get("staged", {}).get("version")))
    # stage replaces the candidate, list changes nothing, abort drops it, promote serves it
    assert seen == [(4, 5), (4, 5), (4, None), (4, 5), (5, None)], seen
    assert '"staged"' in shell.text()  # what `release list` printed
    status, answer = put(daemon, kit.root / "digits-4.wgb")  # the floor rose to 5
    assert (status, "rollback" in answer["error"]) == (422, True), answer

"""Derived caches against a real daemon: an edited cache entry is refused and rebuilt.

The host profile caches ONNX Runtime's optimized graph (``cache/models/ort-optimized``) and
the daemon caches compiled adapters (``cache/modules``). A local attacker edits the weight
of ``double`` (y = 2x becomes y = 3x) in the cached graph, writes a fresh checksum beside it
(what defeated the old ``.sha256`` sidecar), and flips a byte of the compiled module. After
a restart the answers are still right, and the log says both entries were refused.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.reliability.conftest import post
from tests.runtime.trustkit import Tenants, daemon_config

TWO, THREE = struct.pack("<f", 2.0), struct.pack("<f", 3.0)


def _answers(daemon: Daemon) -> tuple[bytes, bytes]:
    """The adapter running the model through wasi-nn, and the model over KServe V2."""
    _, _, adapter = post(f"{daemon.url}/v1/adapters/probe", b"M")
    body = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}'
    _, _, model = post(f"{daemon.url}/v2/models/double/infer", body)
    return adapter, model


def _tamper(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    at = data.rindex(old)
    edited = data[:at] + new + data[at + len(old) :]
    path.write_bytes(edited)
    path.with_suffix(".sha256").write_text(hashlib.sha256(edited).hexdigest())


def test_edited_cache_entries_are_refused_and_rebuilt(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    tenants = Tenants(tmp_path / "kit", {"t": ["*"]})
    trust = tenants.write_trust(tmp_path / "trust.json")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    tenants.build("t", "probe", 1, out_dir=bundles)
    daemon = daemon_factory(config=daemon_config(trust), name="d")
    good = _answers(daemon)
    assert good[0] == b"v1:2,4,6,8"
    assert b"[2.0,4.0,6.0,8.0]" in good[1].replace(b" ", b"")
    daemon.stop()

    cache = daemon.workdir / "data" / "cache"
    (graph,) = (cache / "models" / "ort-optimized").glob("*.onnx")
    (module,) = (cache / "modules").glob("*.cwasm")
    for folder in (graph.parent, module.parent):
        assert folder.stat().st_mode & 0o777 == 0o700
    _tamper(graph, TWO, THREE)
    _tamper(module, module.read_bytes()[-64:-60], b"\xcc\xcc\xcc\xcc")
    tampered = graph.read_bytes(), module.read_bytes()

    daemon.start()
    assert _answers(daemon) == good
    log = daemon.log()
    for entry in (graph, module):
        assert f"cache entry {entry} refused" in log
    assert (graph.read_bytes(), module.read_bytes()) != tampered  # rebuilt from the bundle
    daemon.stop()
    daemon.start()  # the rebuilt entries are accepted
    assert _answers(daemon) == good
    assert daemon.log().count("refused: not what this daemon derived") == 2

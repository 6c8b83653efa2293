"""Reliability fixtures: signed pass-through bundles (`tests.fixtures.benchkit`) and helpers.

Every test here runs real processes on loopback (``wasmgate serve``, mosquitto) and bounds
its own time and request count.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.waits import until
from wasmgate.guest_adapters.examples import stage_example
from wasmgate.signing.build import build_bundle

DIGITS_X = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
TOKEN = "reliability-token"


@pytest.fixture
def kit(tmp_path: Path, models: object) -> BenchKit:
    """A kit whose bundle directory holds ``digits`` v1 (pass-through adapter + model)."""
    kit = BenchKit(tmp_path / "kit")
    kit.build("digits", models.digits_fp32)  # type: ignore[attr-defined]
    return kit


def example_bundle(
    kit: BenchKit, name: str, version: int = 1, *, deadline_ms: int | None = None
) -> Path:
    """Sign the bundled example adapter ``name`` (``guest_adapters/examples``) into the kit.

    ``deadline_ms`` replaces the manifest's ``[limits] deadline_ms`` (the examples ask for
    1 s, which queueing alone can spend on a loaded machine: then 504 tells nothing)."""
    src = stage_example(name, kit.root / "examples")
    if deadline_ms is not None:
        manifest = src / "bundle.toml"
        line = f"deadline_ms = {deadline_ms}"
        text, n = re.subn(r"(?m)^deadline_ms = \d+$", line, manifest.read_text())
        assert n == 1, f"{manifest}: no single [limits] deadline_ms to replace"
        manifest.write_text(text)
    out = kit.bundle_dir / f"{name}-{version}.wgb"
    build_bundle(src, kit.key, out, version=version)
    return out


def digits_payload(x: npt.NDArray[np.float32] = DIGITS_X) -> bytes:
    return payload(x)


def post(url: str, body: bytes, timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a POST; HTTP errors are answers too."""
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def put_bundle(daemon: Daemon, data: bytes) -> tuple[int, bytes]:
    return put(daemon, "/v1/bundles", data)


def put(daemon: Daemon, path: str, data: bytes) -> tuple[int, bytes]:
    """(status, body) of a management ``PUT`` with the token; HTTP errors are answers too."""
    req = urllib.request.Request(
        f"{daemon.url}{path}",
        data=data,
        method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def served_version(daemon: Daemon) -> str | None:
    """The digits version that answers a good request (None: no 200 answer)."""
    status, headers, _ = post(f"{daemon.url}/v1/adapters/digits", digits_payload())
    return headers.get("X-Wasmgate-Version") if status == 200 else None


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    until(predicate, what, timeout, every_s=0.05)

"""Hot swap under continuous load: the daemon as a subprocess, several client threads.

Zero failed requests while a new version arrives (dropped into the bundle directory and
uploaded through the management API), the version clients see changes, and bad new
versions (failing selftest, untrusted signer) leave the serving one in place.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Self

from tests.fixtures.daemon import Daemon
from tests.fixtures.waits import until
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name

TOKEN = "swap-token"


class Load:
    """Client threads posting to the adapter until stopped; every outcome is recorded."""

    def __init__(self, url: str, threads: int = 6) -> None:
        self.url = url
        self.versions: Counter[str] = Counter()
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                req = urllib.request.Request(self.url, data=b"M", method="POST")
                with urllib.request.urlopen(req, timeout=30) as r:
                    body, version = r.read(), r.headers["X-Wasmgate-Version"]
                ok = body == f"v{version}:2,4,6,8".encode()
                with self._lock:
                    self.versions[version] += 1
                    if not ok:
                        self.failures.append(f"version {version} answered {body!r}")
            except (urllib.error.URLError, OSError) as e:
                with self._lock:
                    self.failures.append(repr(e))

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def wait_for_version(self, version: str, answers: int = 1, timeout: float = 30) -> None:
        def seen() -> bool:
            with self._lock:
                return self.versions[version] >= answers

        until(seen, f"{answers} answers from version {version} (saw {self.versions})", timeout)

    def count(self) -> int:
        with self._lock:
            return sum(self.versions.values())


def _drop(path: Path, directory: Path) -> None:
    """Atomically place a bundle in the watched directory (as an operator's cp+mv does)."""
    tmp = directory / f".{path.name}.part"
    tmp.write_bytes(path.read_bytes())
    tmp.rename(directory / path.name)


def _put(url: str, data: bytes) -> int:
    req = urllib.request.Request(
        f"{url}/v1/bundles",
        data=data,
        method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def _refused(daemon: Daemon, version: int) -> bool:
    """The status page's recent installs show ``version`` refused for its selftest."""
    recent = daemon.get_json("/v1/status")["components"]["bundles"]["recent"]
    return any(
        not e["ok"] and "selftest" in e["message"] and e["version"] == version for e in recent
    )


def test_hot_swap_under_load(tmp_path: Path, daemon_factory: Callable[..., Daemon]) -> None:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    kit.build("probe", 1, out_dir=bundles)
    config = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "http": {"management_token": TOKEN},
        "profile": host_profile_name(),
    }
    daemon = daemon_factory(config=config, name="d")
    with Load(f"{daemon.url}/v1/adapters/probe") as load:
        load.wait_for_version("1")
        _drop(kit.build("probe", 2, selftest=b"M"), bundles)  # via the directory watcher
        load.wait_for_version("2")
        served_before_bad = load.count()
        # bad new versions: failing selftest (file), untrusted signer (API) -> v2 keeps serving
        _drop(kit.build("probe", 3, selftest=b"E"), bundles)
        stranger = BundleKit(tmp_path / "stranger")
        assert _put(daemon.url, stranger.build("probe", 4).read_bytes()) == 422
        until(lambda: _refused(daemon, 3), "the watcher tried the failing file (version 3)")
        assert _put(daemon.url, kit.build("probe", 5).read_bytes()) == 201  # via the API
        load.wait_for_version("5", answers=20)  # and the load goes on against it
    assert load.failures == []
    assert load.count() > served_before_bad > 0
    assert set(load.versions) == {"1", "2", "5"}
    status = daemon.get_json("/v1/status")
    recent = status["components"]["bundles"]["recent"]
    assert _refused(daemon, 3), recent
    assert [e["version"] for e in recent if e["ok"]] == [1, 2, 5]

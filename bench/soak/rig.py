"""What the soak runs against: mosquitto, the fake cloud, signed bundles and a real
``wasmgate serve``, each a process of its own on loopback; plus the faults done to them.

`Rig` owns every process it starts and stops them all in `close` (also after a failure).
Fault methods block (subprocess starts, HTTP to the management API): the soak calls them
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port, terminate, wait_for_port
from tests.fixtures.thread_names import every_thread, probe_env
from tests.fixtures.zig import compile_c

GATEWAY = "soak"
TOKEN = "soak-token"  # noqa: S105 - a throwaway daemon on loopback
ADAPTER = Path(__file__).resolve().parent / "soak_adapter.c"
REPO = Path(__file__).resolve().parents[2]
EDGE_FALLBACK = "[fallback]\nallowed = true\non_adapter_request = true\nsend_payload = true\n"


class Cloud:
    """The fake cloud process (`bench.soak.cloud`): ``stop`` takes it away, ``start``
    brings it back on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "bench.soak.cloud", str(self.port)]
        self._proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, cwd=REPO)
        wait_for_port(self.port, timeout=30)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        terminate(proc)


_WAITPID = re.compile(r"^asyncio-waitpid-\d+$")


def _all_serving(status: dict[str, Any]) -> bool:
    return all(w["state"] == "serving" for w in status["components"]["workers"]["workers"])


class Rig:
    """Broker, cloud and daemon serving the soak's bundles (digits, events, edge, slow)."""

    def __init__(self, root: Path, workers: int = 1) -> None:
        """``workers``: ``[workers] count`` (1: one process, as by default)."""
        self.root = root
        self.workers = workers
        self.broker = Broker(root / "mosquitto")
        self.cloud = Cloud()
        self.kit = BenchKit(root / "kit")
        self.model = get_models().digits_fp32
        self.grpc_port = free_port()
        self.version = 1  # digits' newest version built (hot swaps and stages count up)
        wasm = compile_c([ADAPTER])
        self.kit.build("digits", self.model, wasm=wasm)
        self.kit.build("events", self.model, wasm=wasm)
        self.kit.build("edge", self.model, wasm=wasm, extra=EDGE_FALLBACK)
        self.kit.build("slow", self.model, wasm=wasm, limits={"deadline_ms": 200})
        self._wasm = wasm
        mqtt = {"host": "127.0.0.1", "port": self.broker.port, "gateway_id": GATEWAY,
                "reconnect_max_s": 1.0}  # fmt: skip
        if workers > 1:  # docs/deploy.md: workers on a broker that serves this gateway alone
            mqtt["reconnect_spread_s"] = 0.0
        cloud = {"url": self.cloud.url, "timeout_s": 2.0, "breaker_reset_s": 5.0}
        config: dict[str, Any] = {"mqtt": mqtt, "cloud": cloud, "grpc": {"port": self.grpc_port},
                                  "http": {"management_token": TOKEN},
                                  "workers": {"count": workers}}  # fmt: skip
        # The thread-name probe (a SIGUSR2 handler, no thread): the rest points say which
        # threads came or went, not only how many.
        self._probe = probe_env(root)
        self.daemon: Daemon = self.kit.daemon(root / "daemon", config=config, env=self._probe)
        self.store_db = root / "daemon" / "data" / "state" / "store.db"

    def start(self) -> None:
        self.broker.start()
        self.cloud.start()
        self.daemon.start(timeout=180)

    @property
    def pid(self) -> int:
        if self.daemon.proc is None:
            raise RuntimeError("the daemon is not running")
        return self.daemon.proc.pid

    def pids(self) -> list[int]:
        """The gateway's processes: the daemon, and its workers when it has some."""
        if self.workers == 1:
            return [self.pid]
        workers = self.status()["components"]["workers"]["workers"]
        return [self.pid, *(int(w["pid"]) for w in workers if w["pid"] is not None)]

    def threads(self) -> Counter[str]:
        """The gateway's threads by name, over its processes
        (`tests.fixtures.thread_names.every_thread`)."""
        names: Counter[str] = Counter()
        for pid in self.pids():
            for name, n in every_thread(self.daemon, pid).items():
                # asyncio's child watcher names its thread per child by a running count.
                names[_WAITPID.sub("asyncio-waitpid", name)] += n
        return names

    def settled(self) -> None:
        """Until every worker serves (a change rolls them one at a time)."""
        if self.workers > 1:
            self.wait_status(_all_serving)

    def close(self) -> None:
        try:
            self.daemon.stop()
        finally:
            self.cloud.stop()
            self.broker.stop()

    # Faults -------------------------------------------------------------------------

    def restart_broker(self) -> None:
        self.broker.restart()

    def sighup(self) -> None:
        os.kill(self.pid, signal.SIGHUP)

    def _next_digits(self) -> Path:
        self.version += 1
        out = self.root / "built"
        out.mkdir(exist_ok=True)
        return self.kit.build("digits", self.model, self.version, out_dir=out, wasm=self._wasm)

    def hot_swap_api(self) -> str:
        """``PUT /v1/bundles`` of the next digits version; the status and version."""
        return f"{self._manage('PUT', '/v1/bundles', self._next_digits())} v{self.version}"

    def hot_swap_dir(self) -> str:
        """The next digits version dropped into the bundle directory (copy, then rename)."""
        built = self._next_digits()
        tmp = self.kit.bundle_dir / f".{built.name}.part"
        shutil.copyfile(built, tmp)
        tmp.rename(self.kit.bundle_dir / built.name)
        return f"dropped v{self.version}"

    def stage(self, percent: int) -> str:
        built = self._next_digits()
        return f"{self._manage('PUT', f'/v1/bundles?stage={percent}', built)} v{self.version}"

    def abort(self) -> str:
        return str(self._manage("POST", "/v1/bundles/digits/abort", None))

    def _manage(self, method: str, path: str, body_file: Path | None) -> int:
        data = body_file.read_bytes() if body_file is not None else b""
        req = urllib.request.Request(f"{self.daemon.url}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    def served_version(self) -> int:
        """The digits version serving now (``GET /v2/models/digits``)."""
        return int(self.daemon.get_json("/v2/models/digits").get("versions", ["0"])[-1])

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.daemon.get_json("/v1/status")
        return status

    def wait_status(self, check: Any, timeout: float = 30.0) -> dict[str, Any]:
        """Poll /v1/status until ``check(status)`` holds (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        status = self.status()
        while not check(status) and time.monotonic() < deadline:
            time.sleep(0.2)
            status = self.status()
        return status

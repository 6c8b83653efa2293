"""The simulator's infrastructure: mosquitto, docker-registry, keys, bundles, workers.

`SimFleet` starts one real mosquitto (its limits raised in its own config: ``max_connections
-1``, queues and ``$SYS`` every second) and one real ``docker-registry``, builds and pushes
the ``probe`` bundle with the real CLI, and starts the worker processes
(`bench.fleetsim.worker`). The operator side is the installed ``wasmgate`` CLI, run as a
subprocess so that its RSS and CPU are its own (``os.wait4``).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from tests.signing.fleetkit import FleetKit
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.runtime.fleet.status import Report, parse_report
from wasmgate.signing.keys import write_private_key

GROUP = "g1"
PREFIX = "wasmgate/v1"
CLI = str(Path(sys.executable).with_name("wasmgate"))
BROKER_CONF = (
    "max_connections -1\n"  # the default is unlimited too, but a packaged conf may set it
    "max_queued_messages 100000\n"
    "max_inflight_messages 0\n"
    "sys_interval 1\n"
)


@dataclass(frozen=True)
class Run:
    """One CLI run: exit code, output, wall time, peak RSS and CPU of the process."""

    code: int
    out: str
    err: str
    wall_s: float
    rss_mb: float
    cpu_s: float


def run_cli(args: list[str]) -> Run:
    """Run the CLI; its own peak RSS and CPU come from ``wait4`` (not a sum over children)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([CLI, *args], stdout=out, stderr=err, text=True)
        _pid, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return Run(
            proc.returncode, out.read(), err.read(), wall,
            ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime,
        )  # fmt: skip


class Worker:
    """One worker process and its JSON-lines conversation."""

    def __init__(self, config: Path, first: int, count: int) -> None:
        self.names = [f"gw-{i:05d}" for i in range(first, first + count)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fleetsim.worker", str(config), str(first), str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def send(self, cmd: str, names: list[str] | None = None) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, "names": names or []}) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.names[0]}.. exited ({self.proc.poll()})")
        return dict(json.loads(line))

    def quit(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class SimFleet:
    """Broker, registry, keys, the probe bundle, N gateways in ``workers`` processes."""

    def __init__(self, root: Path, gateways: int, per_worker: int, spread_s: float) -> None:
        _raise_nofile()  # mosquitto inherits it: one descriptor per gateway
        self.root, self.n = root, gateways
        self.broker = Broker(root / "mosquitto", BROKER_CONF)
        self.registry = Registry(root / "registry")
        self.keys = FleetKit(n_fleet=1, names=["probe*"], signer_names=["*"])
        self.bundles = BundleKit(root / "bundles")
        self.trust = root / "trust.json"
        self.key_file = root / "fleet.key"
        self.per_worker = per_worker
        self.spread_s = spread_s
        self.workers: list[Worker] = []

    @property
    def address(self) -> str:
        return f"{self.broker.host}:{self.broker.port}"

    def start(self) -> None:
        self.trust.write_bytes(self.keys.trust_bytes())
        write_private_key(self.key_file, self.keys.fleet[0])
        self.broker.start()
        self.registry.start()
        config = self.root / "sim.json"
        config.write_text(json.dumps({
            "host": self.broker.host, "port": self.broker.port, "root": str(self.root / "gw"),
            "group": GROUP, "trust": str(self.trust), "spread_s": self.spread_s,
        }))  # fmt: skip
        for first in range(0, self.n, self.per_worker):
            self.workers.append(Worker(config, first, min(self.per_worker, self.n - first)))
        self.all("wait")

    def names(self) -> list[str]:
        return [n for w in self.workers for n in w.names]

    def all(self, cmd: str, names: list[str] | None = None) -> list[dict[str, Any]]:
        for w in self.workers:
            w.send(cmd, names)
        return [w.answer() for w in self.workers]

    def push(self, version: int) -> str:
        path = self.bundles.build("probe", version, key=self.keys.signer)
        ref = f"{self.registry.address}/wasmgate/probe:{version}"
        got = run_cli(["bundle", "push", str(path), ref, "--insecure"])
        if got.code != 0:
            raise RuntimeError(f"push failed: {got.err}")
        return ref

    def rollout(self, ref: str, *args: str) -> Run:
        return run_cli([
            "fleet", "rollout", "--broker", self.address, "--group", GROUP,
            "--key", str(self.key_file), "--insecure", *args, ref,
        ])  # fmt: skip

    def status(self, *args: str) -> Run:
        return run_cli(["fleet", "status", "--broker", self.address, "--group", GROUP, *args])

    def reports(self) -> dict[str, Report]:
        with OperatorClient(BrokerSettings(self.broker.host, self.broker.port)) as client:
            got = client.collect([f"{PREFIX}/+/deployment"], 30)
        out = {}
        for payload in got.values():
            report = parse_report(payload)
            if report is not None:
                out[report.gateway] = report
        return out

    def wait_reports(self, ok: Any, timeout: float) -> dict[str, Report]:
        deadline = time.monotonic() + timeout
        while True:
            reports = self.reports()
            if ok(reports) or time.monotonic() > deadline:
                return reports
            time.sleep(1.0)

    def broker_rss_mb(self) -> float:
        proc = self.broker._proc  # noqa: SLF001 - the fixture keeps its process private
        assert proc is not None
        text = Path(f"/proc/{proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", text)[1]) / 1024  # type: ignore[index]

    def broker_connects(self, since: float) -> dict[int, int]:
        """Gateway connections the broker accepted per second since ``since`` (its log's
        epoch seconds): the load the broker saw, apart from when each worker's loop got
        round to the CONNACK (a starved worker handles a second's worth at once)."""
        line = re.compile(r"^(\d+): New client connected from \S+ as sim-gw-", re.MULTILINE)
        counts: dict[int, int] = {}
        for m in line.finditer(self.broker.log_text()):
            if int(m[1]) >= int(since):
                counts[int(m[1])] = counts.get(int(m[1]), 0) + 1
        return counts

    def registry_requests(self) -> dict[str, int]:
        log = self.registry.log_text()
        return {
            "manifests": len(re.findall(r'"GET /v2/[^ ]+/manifests/', log)),
            "blobs": len(re.findall(r'"GET /v2/[^ ]+/blobs/', log)),
        }

    def stop(self) -> None:
        for w in self.workers:
            w.quit()
        self.registry.stop()
        self.broker.stop()


@contextmanager
def sim_fleet(
    root: Path, gateways: int, per_worker: int, spread_s: float | None = None
) -> Iterator[SimFleet]:
    """The fleet; ``spread_s`` defaults to what docs/fleet.md asks of a fleet: N / 100 s."""
    fleet = SimFleet(root, gateways, per_worker, gateways / 100 if spread_s is None else spread_s)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


def _raise_nofile() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

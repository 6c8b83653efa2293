"""Peer servers for the suite: Seldon MLServer 1.7 and Triton's ``perf_analyzer``.

Each lives in its own virtual environment under ``~/.cache/wasmgate-bench/`` (never the
project's), installed once by `ensure()` with pip and marked complete with a ``.ok`` file,
so a later run (and ``--quick``) starts at once and nothing is downloaded while measuring.

- MLServer serves the same ONNX files through the small custom runtime below
  (``onnx_runtime.OnnxModel``: one ``onnxruntime.InferenceSession``, NumpyCodec in/out),
  ``parallel_workers = 0`` (inference in the server process: its lowest-overhead setting).
- perf_analyzer comes from the ``tritonclient==2.50.0`` wheel (the last one whose binary
  runs on glibc 2.36); it links ``libcudart.so.12`` (from ``nvidia-cuda-runtime-cu12``, no
  GPU needed) and ``libb64.so.0d`` (Debian ``libb64-0d``).
"""

from __future__ import annotations

import csv
import ctypes.util
import fcntl
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.net import free_port, terminate, wait_for_port

CACHE = Path(os.environ.get("WASMGATE_BENCH_CACHE") or Path.home() / ".cache" / "wasmgate-bench")

RUNTIME = '''"""MLServer custom runtime: one ONNX Runtime session per model (wasmgate bench)."""
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        uri = self.settings.parameters.uri
        self._session = ort.InferenceSession(uri, providers=["CPUExecutionProvider"])
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        results = self._session.run(None, feeds)
        outputs = [NumpyCodec.encode_output(n, r) for n, r in zip(self._outputs, results)]
        return InferenceResponse(model_name=self.name, outputs=outputs)
'''


@dataclass(frozen=True)
class Peer:
    """One peer's venv: what pip installs there and the file that proves it works."""

    name: str
    requirements: tuple[str, ...]
    check: str  # relative to the venv

    @property
    def venv(self) -> Path:
        return CACHE / self.name

    @property
    def cached(self) -> bool:
        return (self.venv / ".ok").exists()

    def ensure(self) -> Path:
        """Install once (venv + pip); returns the venv. Raises with pip's output on failure."""
        if self.cached:
            return self.venv
        CACHE.mkdir(parents=True, exist_ok=True)
        # Two test workers may both find it missing: one installs, the other waits, then reuses.
        with (CACHE / f"{self.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.cached:
                self._install()
        return self.venv

    def _install(self) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(self.venv)], check=True)
        pip = [str(self.venv / "bin" / "pip"), "install", "-q", *self.requirements]
        done = subprocess.run(pip, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (self.venv / self.check).exists():
            raise RuntimeError(f"installing {self.name} failed:\n{done.stdout}{done.stderr}")
        (self.venv / ".ok").write_text(" ".join(self.requirements) + "\n")


MLSERVER = Peer("mlserver-1.7", ("mlserver==1.7.1", "onnxruntime"), "bin/mlserver")
PERF_ANALYZER = Peer(
    "perf-analyzer-2.50.0",
    ("tritonclient[http]==2.50.0", "nvidia-cuda-runtime-cu12"),
    "bin/perf_analyzer",
)


def missing_system_libs() -> list[str]:
    """perf_analyzer's Debian dependency, if it is not installed."""
    found = ctypes.util.find_library("b64") or any(Path("/usr/lib").glob("*/libb64.so.0d"))
    return [] if found else ["libb64-0d (apt-get install libb64-0d)"]


def perf_analyzer_env(venv: Path) -> dict[str, str]:
    site = next((venv / "lib").glob("python3*/site-packages"))
    lib = site / "nvidia" / "cuda_runtime" / "lib"
    return {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"}


def perf_analyzer(
    url: str,
    model: str,
    requests: int,
    out: Path,
    *,
    protocol: str = "http",
    concurrency: int = 1,
    stability: int = 50,
    extra: Sequence[str] = (),
) -> dict[str, float]:
    """p50 (seconds) and req/s of perf_analyzer's count windows (``requests`` each, until the
    last three are within ``stability`` percent of each other) against ``url`` (host:port);
    ``extra``: more of its options (e.g. ``--shared-memory system``)."""
    venv = PERF_ANALYZER.ensure()
    cmd = [str(venv / "bin" / "perf_analyzer"), "-m", model, "-u", url, "-i", protocol,
           "--concurrency-range", str(concurrency), "--measurement-mode", "count_windows",
           "--measurement-request-count", str(requests), "-s", str(stability),
           "-f", str(out), *extra]  # fmt: skip
    done = subprocess.run(cmd, env=perf_analyzer_env(venv), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with out.open() as f:
        row = next(csv.DictReader(f))
    return {"req/s": float(row["Inferences/Second"]), "p50": float(row["p50 latency"]) / 1e6}


class MlServer:
    """``mlserver start`` on free loopback ports serving ``models`` (name -> .onnx)."""

    def __init__(self, root: Path, models: dict[str, Path]) -> None:
        self.venv = MLSERVER.ensure()
        self.root = root
        self.port = free_port()
        settings = {
            "host": "127.0.0.1",
            "http_port": self.port,
            "grpc_port": free_port(),
            "metrics_port": free_port(),
            "parallel_workers": 0,
            "debug": False,
        }
        root.mkdir(parents=True, exist_ok=True)
        (root / "settings.json").write_text(json.dumps(settings))
        for name, path in models.items():
            folder = root / name
            folder.mkdir(exist_ok=True)
            (folder / "onnx_runtime.py").write_text(RUNTIME)
            ms = {
                "name": name,
                "implementation": "onnx_runtime.OnnxModel",
                "parameters": {"uri": str(path.resolve())},
            }
            (folder / "model-settings.json").write_text(json.dumps(ms))
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (root / "mlserver.log").open("wb")
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "mlserver"), "start", str(root)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=root,
        )

    def wait_ready(self, models: list[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for name in models:
            while not self._ready(name):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mlserver exited:\n{self.log()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"mlserver model {name} not ready:\n{self.log()}")
                time.sleep(0.1)

    def _ready(self, name: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/v2/models/{name}/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log(self) -> str:
        return (self.root / "mlserver.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        terminate(self.proc, 20)
        self._log.close()


class BareServer:
    """`bench.bare_server` (the bare aiohttp + ONNX Runtime ceiling) on a free port."""

    def __init__(self, models: dict[str, Path]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [f"{name}={path}" for name, path in models.items()]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.bare_server", str(self.port), *args],
            cwd=Path(__file__).resolve().parents[1],
        )
        wait_for_port(self.port, timeout=60)

    def stop(self) -> None:
        terminate(self.proc, 10)

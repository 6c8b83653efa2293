"""A real ``wasmgate serve`` process with signed benchmark bundles, for the suite and tests.

`BenchKit(root)` signs bundles with a fresh Ed25519 key: each one is the pass-through C
adapter of ``tests/sandbox/guests/bench_adapter.c`` (payload: u32 rank, u32 dims, FP32 data;
answer: output 0's bytes) plus one ONNX model under the same name, so ``/v1/adapters/<name>``
(sandboxed) and ``/v2/models/<name>/infer`` (direct) reach the same session.
`start_daemon()` runs the daemon with those bundles in its bundle directory on free ports.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.signing
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from tests.fixtures.daemon import Daemon
from tests.fixtures.zig import compile_c
from wasmgate.signing.build import build_bundle
from wasmgate.signing.keys import generate_key
from wasmgate.signing.trust import TrustStore

REPO = Path(__file__).resolve().parents[1]
GUEST = REPO / "tests" / "sandbox" / "guests" / "bench_adapter.c"
V2_TYPES = {"tensor(float)": "FP32"}


def payload(x: npt.NDArray[np.float32]) -> bytes:
    """The pass-through adapter's request body for tensor ``x``."""
    return struct.pack(f"<{1 + x.ndim}I", x.ndim, *x.shape) + x.astype("<f4").tobytes()


def _io(args: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": a.name,
            "datatype": V2_TYPES[a.type],
            "shape": [d if isinstance(d, int) else -1 for d in a.shape],
        }
        for a in args
    ]


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str | Path) else str(value)


@dataclass(frozen=True)
class ModelIO:
    """The V2 signature of a model file (from ONNX Runtime)."""

    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]

    @classmethod
    def of(cls, path: Path) -> ModelIO:
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return cls(_io(s.get_inputs()), _io(s.get_outputs()))


class BenchKit:
    """Signs benchmark bundles into ``root/bundles`` and writes the trust file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bundle_dir = root / "bundles"
        self.bundle_dir.mkdir(parents=True, exist_ok=True)
        self.key: nacl.signing.SigningKey = generate_key()
        self.trust_file = root / "trust.json"
        TrustStore.empty().with_signer(self.key.verify_key, ["*"], {}).save(self.trust_file)
        self.wasm = compile_c([GUEST])

    def build(
        self,
        name: str,
        model: Path,
        version: int = 1,
        *,
        batching: Mapping[str, int] | None = None,
        limits: Mapping[str, int] | None = None,
        out_dir: Path | None = None,
        extra: str = "",
        wasm: Path | None = None,
    ) -> Path:
        """Write ``<name>-<version>.wgb`` (default into the bundle directory); returns it.

        ``wasm`` replaces the pass-through adapter (e.g. a hostile module).
        """
        io = ModelIO.of(model)
        src = self.root / "src" / f"{name}-{version}"
        src.mkdir(parents=True, exist_ok=True)
        lim = {"memory_mb": 64, "deadline_ms": 10_000, "max_input_bytes": 4 << 20}
        lim.update(limits or {})
        entry = {
            "name": name,
            "format": "onnx",
            "variants": {"fp32": str(model)},
            "inputs": io.inputs,
            "outputs": io.outputs,
            "batching": dict(batching or {"max_batch_size": 1, "max_queue_delay_us": 0}),
        }
        text = (
            f'name = "{name}"\nversion = {version}\n'
            f'[adapter]\nfile = "{wasm or self.wasm}"\nmode = "fresh"\n'
            f'[params]\nmodel = "{name}"\n'
            f"[limits]\n" + "".join(f"{k} = {v}\n" for k, v in lim.items()) + extra + "\n"
            "[[models]]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in entry.items())
        )
        (src / "bundle.toml").write_text(text)
        out = (out_dir or self.bundle_dir) / f"{name}-{version}.wgb"
        build_bundle(src, self.key, out)
        return out

    def config(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Daemon config sections serving this kit's bundles (``extra`` merged per section)."""
        paths = {"bundle_dir": self.bundle_dir, "trust_file": self.trust_file}
        sections: dict[str, Any] = {"paths": paths, "log": {"level": "WARNING"}}
        for key, value in (extra or {}).items():
            sections[key] = {**sections.get(key, {}), **value} if isinstance(value, dict) else value
        return sections

    def daemon(
        self,
        workdir: Path,
        *,
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Daemon:
        """A (not yet started) daemon serving this kit's bundle directory."""
        workdir.mkdir(parents=True, exist_ok=True)
        return Daemon(workdir, self.config(config), (), dict(env or {}))


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (``VmRSS`` from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def daemon_pid(daemon: Daemon) -> int:
    if daemon.proc is None:
        raise RuntimeError("daemon not running")
    return daemon.proc.pid

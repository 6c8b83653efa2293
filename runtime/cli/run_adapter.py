"""``wasmgate adapter test``: run an adapter locally in the real sandbox with real models.

What the daemon would do for one request, minus signing, batching and transports: the
adapter runs in a fresh ``wasmgate.sandbox`` instance under the bundle's limits, models come
from files through the daemon's backends and device profile (``--profile``, else detected;
a full-integer TFLite model keeps the daemon's float interface), ``param.*`` from bundle.toml.
With a ``[state]`` table the adapter gets a scratch in-memory state store under that grant,
shared by the payloads of one run (in their order) and gone afterwards.
The answer goes to stdout; status, fallback requests, events and guest logs to stderr.

Samples meant to fail say so in ``samples/expect.toml`` (``"malformed.json" = 1``: the
status that sample should get; unlisted samples should get 0). A run passes when every
payload got the status it was expected to get, so an unmodified example passes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasmgate._compat import tomllib
from wasmgate.guest_adapters.build import build_adapter
from wasmgate.guest_adapters.errors import AdapterSourceError
from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.bundles.kv import StateDb, TenantState
from wasmgate.runtime.cli._common import say
from wasmgate.runtime.cli._models import PreloadedModels, load_model, profile_named
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox import GuestLimits, SandboxEngine, SandboxError
from wasmgate.sandbox.limits import MIB
from wasmgate.sandbox.models import ModelHandle

_STATUS = {0: "ok", 1: "bad input", 2: "adapter error"}
_TYPES = {".json": "application/json", ".bin": "application/octet-stream"}
EXPECT_FILE = "expect.toml"


@dataclass(frozen=True)
class Payload:
    label: str
    data: bytes
    content_type: str | None
    expect: int = 0  # the status this payload should get (samples/expect.toml)


@dataclass
class TestRun:
    wasm: bytes
    models: dict[str, Path] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    limits: GuestLimits = field(default_factory=GuestLimits)
    payloads: list[Payload] = field(default_factory=list)
    profile: str | None = None
    state: tuple[int, int] | None = None  # [state] max_bytes, max_keys

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TestRun:
        src: Path = args.adapter
        bundle = _read_bundle(src / "bundle.toml") if src.is_dir() else {}
        run = cls(wasm=_wasm(src))
        base = src if src.is_dir() else src.parent
        for model in bundle.get("models", []):
            variants: dict[str, str] = model.get("variants", {})
            chosen = variants.get("fp32") or next(iter(variants.values()), None)
            if chosen:
                run.models[str(model["name"])] = base / chosen
        for key, value in bundle.get("params", {}).items():
            run.meta[f"param.{key}"] = _param(value)
        run.limits = _limits(bundle.get("limits", {}))
        run.state = _state(bundle.get("state"))
        for item in args.model:
            name, path = _pair(item, "--model")
            run.models[name] = Path(path)
        for item in args.param:
            k, v = _pair(item, "--param")
            run.meta[f"param.{k}"] = v
        for item in args.meta:
            k, v = _pair(item, "--meta")
            run.meta[k] = v
        run.payloads = _payloads(args.payload, src, args.content_type)
        run.profile = args.profile
        return run

    def passed(self, statuses: list[int]) -> bool:
        """Every payload got the status it was expected to get."""
        return all(s == p.expect for s, p in zip(statuses, self.payloads, strict=True))

    def run_all(self) -> list[int]:
        options = LoadOptions(profile_named(self.profile))
        provider = PreloadedModels(self._load_models(options), options)
        with (
            tempfile.TemporaryDirectory(prefix="wasmgate-test-") as tmp,
            SandboxEngine(Path(tmp) / "modules") as engine,
            StateDb(None) as scratch,
        ):
            state = scratch.tenant("adapter", *self.state) if self.state else None
            try:
                adapter = engine.compile(self.wasm, name="adapter")
            except SandboxError as e:
                raise AdapterSourceError(f"the sandbox refuses this adapter: {e}") from e
            return [self._one(adapter, p, provider, state) for p in self.payloads]

    def _load_models(self, options: LoadOptions) -> dict[str, ModelHandle]:
        handles: dict[str, ModelHandle] = {}
        for name, path in self.models.items():
            encoding = "tflite" if path.suffix == ".tflite" else "onnx"
            try:
                handles[name] = load_model(path.read_bytes(), encoding, name, options)
            except OSError as e:
                raise AdapterSourceError(f"model {name}: cannot read {path}: {e.strerror}") from e
            except BackendError as e:
                raise AdapterSourceError(f"model {name}: cannot load {path}: {e}") from e
        return handles

    def _one(
        self, adapter: Any, p: Payload, provider: PreloadedModels, state: TenantState | None
    ) -> int:
        meta = {"adapter": "test", "transport": "local", "content_type": p.content_type or ""}
        meta |= self.meta
        many = len(self.payloads) > 1
        try:
            res = adapter.run(p.data, meta, provider, self.limits, state=state)
        except SandboxError as e:
            print(f"{p.label}: sandbox refused the run: {e}", file=sys.stderr)
            return 2
        for line in res.logs:
            print(f"{p.label}: log: {line}", file=sys.stderr)
        answer = res.output.decode("utf-8", errors="replace")
        prefix = f"{p.label}: " if many else ""
        ms = (res.instantiate_s + res.run_s) * 1000
        note = f"status {res.status} ({_STATUS.get(res.status, '?')}), {ms:.1f} ms"
        if p.expect != 0:
            verdict = "as expected" if res.status == p.expect else "UNEXPECTED"
            note += f", {verdict} by samples/{EXPECT_FILE} (status {p.expect})"
        if res.fallback_reason:
            note += f", asks for cloud fallback: {res.fallback_reason}"
        for event in res.events:
            print(f"{p.label}: event: {event.decode('utf-8', errors='replace')}", file=sys.stderr)
        print(f"{p.label}: {note}", file=sys.stderr)
        print(prefix + answer, file=sys.stdout if res.status == 0 else sys.stderr)
        return int(res.status)


def _wasm(src: Path) -> bytes:
    if src.suffix == ".wasm":
        try:
            return src.read_bytes()
        except OSError as e:
            raise AdapterSourceError(f"{src}: cannot read: {e.strerror}") from e
    return build_adapter(src, progress=say).path.read_bytes()


def _read_bundle(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise AdapterSourceError(f"{path}: {e}") from e


def _limits(raw: Mapping[str, Any]) -> GuestLimits:
    kwargs: dict[str, Any] = {}
    if isinstance(raw.get("memory_mb"), int):
        kwargs["memory_bytes"] = raw["memory_mb"] * MIB
    if isinstance(raw.get("deadline_ms"), int):
        kwargs["deadline_s"] = raw["deadline_ms"] / 1000
    if isinstance(raw.get("max_output_bytes"), int):
        kwargs["max_output_bytes"] = raw["max_output_bytes"]
    return GuestLimits(**kwargs)


def _state(raw: object) -> tuple[int, int] | None:
    if raw is None:
        return None
    values = [raw.get(k) if isinstance(raw, dict) else None for k in ("max_bytes", "max_keys")]
    sizes = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if len(sizes) != len(values):
        raise AdapterSourceError("bundle.toml [state] wants max_bytes and max_keys (> 0)")
    return sizes[0], sizes[1]


def _param(value: object) -> str:
    # Same rendering as the daemon's loader: TOML booleans become "true"/"false".
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _pair(item: str, option: str) -> tuple[str, str]:
    key, eq, value = item.partition("=")
    if not eq or not key:
        raise AdapterSourceError(f"{option} wants K=V, got {item!r}")
    return key, value


def _expectations(samples: Path) -> dict[str, int]:
    """``samples/expect.toml``: sample file name -> expected status (0 when unlisted)."""
    raw = _read_bundle(samples / EXPECT_FILE)
    for name, status in raw.items():
        if not isinstance(status, int) or isinstance(status, bool) or status not in _STATUS:
            raise AdapterSourceError(f"{samples / EXPECT_FILE}: {name}: want a status 0, 1 or 2")
    return {str(k): int(v) for k, v in raw.items()}


def _payloads(items: list[str], src: Path, content_type: str | None) -> list[Payload]:
    paths: list[str | Path] = list(items)
    expect: dict[str, int] = {}
    samples = src / "samples"
    if not paths and src.is_dir() and samples.is_dir():
        expect = _expectations(samples)
        paths = sorted(p for p in samples.iterdir() if p.is_file() and p.name != EXPECT_FILE)
        if unknown := sorted(set(expect) - {p.name for p in paths if isinstance(p, Path)}):
            raise AdapterSourceError(f"{samples / EXPECT_FILE}: no such sample: {unknown[0]}")
    if not paths:
        raise AdapterSourceError("no payload: give --payload FILE (or - for stdin)")
    out = []
    for item in paths:
        if item == "-":
            out.append(Payload("stdin", sys.stdin.buffer.read(), content_type))
            continue
        path = Path(item)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise AdapterSourceError(f"payload {path}: cannot read: {e.strerror}") from e
        kind = content_type or _TYPES.get(path.suffix)
        out.append(Payload(path.name, data, kind, expect.get(path.name, 0)))
    return out

"""Shared pieces of the example-adapter tests: built examples, a real sandbox, model files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.backends import load_model
from tests.fixtures.cache import cache_dir
from wasmgate.guest_adapters.build import build_adapter
from wasmgate.guest_adapters.examples import example_dir
from wasmgate.sandbox import Adapter, GuestLimits, GuestResult, SandboxEngine
from wasmgate.sandbox.models import ModelHandle

# The models each example's bundle.toml declares, by load_by_name name -> ModelFiles field.
EXAMPLE_MODELS: dict[str, dict[str, str]] = {
    "digits": {"digits-mlp": "digits_fp32"},
    "vibration-anomaly": {"anomaly": "anomaly_fp32"},
    "digits-zig": {"digits-zig-mlp": "digits_fp32"},
    "digits-pipeline": {"pipeline-gate": "gate_fp32", "pipeline-digits": "digits_fp32"},
}
LIMITS = GuestLimits(memory_bytes=16 * 1024 * 1024, deadline_s=5.0)


def build_example(name: str) -> bytes:
    """The example compiled from source by the real build step (cached in the test cache)."""
    return build_adapter(example_dir(name), cache_dir=cache_dir("adapters")).path.read_bytes()


@dataclass
class RecordingModels:
    """A ModelProvider over real backend (ONNX Runtime) models that records what was loaded."""

    named: Mapping[str, ModelHandle]
    loaded: list[str] = field(default_factory=list)

    def by_name(self, name: str) -> ModelHandle | None:
        self.loaded.append(name)
        return self.named.get(name)

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        return None  # examples load by name only


def load_models(models: object, example: str) -> dict[str, ModelHandle]:
    return {
        name: load_model(Path(getattr(models, attr)).read_bytes(), name)
        for name, attr in EXAMPLE_MODELS[example].items()
    }


@dataclass
class Runner:
    """One compiled example adapter plus its models; ``run`` is one sandboxed request."""

    adapter: Adapter
    models: dict[str, ModelHandle]
    params: dict[str, str]

    def run(
        self,
        payload: bytes | object,
        *,
        content_type: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> tuple[GuestResult, RecordingModels]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        meta = {"adapter": self.adapter.name, "transport": "local"}
        meta["content_type"] = content_type or ""
        meta |= {f"param.{k}": v for k, v in (params or self.params).items()}
        provider = RecordingModels(self.models)
        return self.adapter.run(data, meta, provider, LIMITS), provider


def make_runner(engine: SandboxEngine, models: object, example: str) -> Runner:
    import tomllib  # noqa: PLC0415

    toml = tomllib.loads((example_dir(example) / "bundle.toml").read_text())
    params = {k: str(v) for k, v in toml.get("params", {}).items()}
    adapter = engine.compile(build_example(example), name=example)
    return Runner(adapter, load_models(models, example), params)

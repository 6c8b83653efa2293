"""The serving table: which loaded bundle version answers which adapter and model name.

All mutations happen on the event loop. A switch is one dict assignment, so a request sees
either the old or the new version, never a mix; leases keep a replaced version alive until
its last request finishes, then the ``closer`` unloads it (off the loop).
Names are global: an adapter or model name belongs to one bundle at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from wasmgate.runtime.bundles.loaded import LoadedBundle, ServedModel
from wasmgate.runtime.errors import NotFound
from wasmgate.runtime.serving.api import ModelInfo
from wasmgate.sandbox.models import TensorSpec

ADAPTER_PLATFORM = "wasmgate_adapter"
ADAPTER_INPUT = TensorSpec("payload", "BYTES", (1,))
ADAPTER_OUTPUT = TensorSpec("answer", "BYTES", (1,))


@dataclass
class Slot:
    """One bundle name: the version serving, and optionally a staged candidate."""

    current: LoadedBundle
    candidate: LoadedBundle | None = None
    percent: int = 0
    """Share of requests (0-100) the candidate answers while staged."""

    def pick(self) -> LoadedBundle:
        if self.candidate is not None and random.random() * 100 < self.percent:
            return self.candidate
        return self.current

    def versions(self) -> list[LoadedBundle]:
        return [self.current] if self.candidate is None else [self.current, self.candidate]


class ServingTable:
    """Bundle name → `Slot`, plus indexes from adapter and model names."""

    def __init__(self, closer: Callable[[LoadedBundle], None]) -> None:
        self._slots: dict[str, Slot] = {}
        self._adapters: dict[str, str] = {}
        self._models: dict[str, str] = {}
        self._closer = closer
        self.started = False

    # -- changes ----------------------------------------------------------------------

    def name_conflict(self, bundle: LoadedBundle) -> str | None:
        """Why ``bundle`` cannot be served next to the others (a taken name), or None.

        Adapters and models share the V2 model namespace across bundles.
        """
        names = [bundle.adapter_name] if bundle.adapter_name else []
        for name in [*names, *bundle.models]:
            owner = self._models.get(name) or self._adapters.get(name)
            if owner is not None and owner != bundle.name:
                return f"name {name!r} is already served by bundle {owner!r}"
        return None

    def activate(self, bundle: LoadedBundle, percent: int = 100) -> None:
        """Serve ``bundle``: fully (100) or staged for ``percent`` of its requests."""
        slot = self._slots.get(bundle.name)
        if slot is None:
            self._slots[bundle.name] = Slot(bundle)
        elif percent >= 100:
            old = [v for v in slot.versions() if v is not bundle]
            self._slots[bundle.name] = Slot(bundle)
            for version in old:
                self._retire(version)
        else:
            if slot.candidate is not None and slot.candidate is not bundle:
                self._retire(slot.candidate)
            slot.candidate, slot.percent = bundle, percent
        self._reindex()

    def promote(self, name: str) -> LoadedBundle:
        """Make the staged candidate of ``name`` the serving version."""
        slot = self.slot(name)
        if slot.candidate is None:
            raise NotFound(f"bundle {name!r} has no staged version")
        candidate = slot.candidate
        self.activate(candidate, 100)
        return candidate

    def remove(self, name: str) -> Slot:
        slot = self._slots.pop(name, None)
        if slot is None:
            raise NotFound(f"no bundle named {name!r} is installed")
        for version in slot.versions():
            self._retire(version)
        self._reindex()
        return slot

    def _retire(self, bundle: LoadedBundle) -> None:
        if bundle.retire():
            self._closer(bundle)

    def _reindex(self) -> None:
        self._adapters = {
            s.current.adapter_name: name
            for name, s in self._slots.items()
            if s.current.adapter_name is not None
        }
        self._models = {m: name for name, s in self._slots.items() for m in s.current.models}

    # -- reads ------------------------------------------------------------------------

    def slot(self, name: str) -> Slot:
        slot = self._slots.get(name)
        if slot is None:
            raise NotFound(f"no bundle named {name!r} is installed")
        return slot

    def slots(self) -> dict[str, Slot]:
        return dict(self._slots)

    def lease_adapter(self, adapter: str) -> LoadedBundle:
        owner = self._adapters.get(adapter)
        if owner is None:
            raise NotFound(f"no adapter named {adapter!r}")
        bundle = self._slots[owner].pick()
        bundle.acquire()
        return bundle

    def lease_model(self, model: str, version: str | None) -> tuple[LoadedBundle, ServedModel]:
        owner = self._models.get(model)
        if owner is None:
            raise NotFound(f"no model named {model!r}")
        slot = self._slots[owner]
        bundle = slot.pick() if version is None else _version(slot, model, version)
        served = bundle.models.get(model)
        if served is None:  # a staged version that dropped the model
            bundle = slot.current
            served = bundle.models[model]
        bundle.acquire()
        return bundle, served

    def release(self, bundle: LoadedBundle) -> None:
        if bundle.release():
            self._closer(bundle)

    def adapter_names(self) -> list[str]:
        return sorted(self._adapters)

    def model_infos(self) -> list[ModelInfo]:
        """Models, then adapters; an adapter named like a model is shadowed in this list."""
        names = sorted(self._models) + sorted(set(self._adapters) - set(self._models))
        return [self.model_info(name) for name in names]

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        is_model = name in self._models
        owner = self._models.get(name) if is_model else self._adapters.get(name)
        if owner is None:
            raise NotFound(f"no model or adapter named {name!r}")
        slot = self._slots[owner]
        bundle = slot.current if version is None else _version(slot, name, version)
        served = bundle.models.get(name) if is_model else None
        if served is None:
            return adapter_info(name, bundle)
        return served_info(served, bundle)


def _version(slot: Slot, name: str, version: str) -> LoadedBundle:
    for bundle in slot.versions():
        if str(bundle.version) == version:
            return bundle
    raise NotFound(f"{name!r} has no version {version!r} (serving {slot.current.version})")


def adapter_info(name: str, bundle: LoadedBundle) -> ModelInfo:
    return ModelInfo(
        name=name,
        version=bundle.version,
        platform=ADAPTER_PLATFORM,
        inputs=(ADAPTER_INPUT,),
        outputs=(ADAPTER_OUTPUT,),
        kind="adapter",
        bundle=bundle.name,
        ready=not bundle.missing_models or bundle.fallback.on_missing_model,
        details={"models": ",".join(bundle.models), "digest": bundle.digest},
    )


def served_info(served: ServedModel, bundle: LoadedBundle) -> ModelInfo:
    return ModelInfo(
        name=served.name,
        version=bundle.version,
        platform=served.platform,
        inputs=tuple(served.inputs),
        outputs=tuple(served.outputs),
        max_batch_size=served.max_batch_size,
        max_queue_delay_us=served.max_queue_delay_us,
        kind="model",
        bundle=bundle.name,
        ready=served.handle is not None,
        details=dict(served.details),
    )

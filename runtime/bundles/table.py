"""The serving table: which loaded bundle version answers which adapter and model name.

All mutations happen on the event loop. A switch is one dict assignment, so a request sees
either the old or the new version, never a mix; leases keep a replaced version alive until
its last request finishes, then the ``closer`` unloads it (off the loop).
Names are global: an adapter name (``routes.http``), an MQTT name (``routes.mqtt``) or a
model name belongs to one bundle at a time, in every role.

A model or adapter name may be unloaded (the model repository extension,
`wasmgate.runtime.dataplane.repository`): its bundle keeps its place and its names, requests
already leased finish, new ones are refused (NotReady) until it is loaded again. Kept in
memory only: a restart serves every name again.

A staged candidate answers ``percent`` of the requests, chosen by a stable hash of the
request's canary key (so one device stays on one version for the whole stage), or by a
random draw when a request has no key. A request may pin a serving or staged version.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from wasmgate.runtime.bundles.infos import adapter_info, claims, served_info
from wasmgate.runtime.errors import DaemonError, NotFound, NotReady, unknown_model
from wasmgate.runtime.served.api import ModelInfo, Namespace
from wasmgate.runtime.served.loaded import LoadedBundle, ServedModel


@dataclass
class Slot:
    """One bundle name: the version serving, and optionally a staged candidate."""

    current: LoadedBundle
    candidate: LoadedBundle | None = None
    percent: int = 0
    """Share of requests (0-100) the candidate answers while staged."""

    def pick(
        self, key: str | None = None, version: str | None = None, name: str | None = None
    ) -> LoadedBundle:
        """The version pinned by ``version``, else the split's choice for ``key``."""
        if version is not None:
            return self.find(version, name)
        if self.candidate is None:
            return self.current
        return self.candidate if bucket(self.candidate, key) < self.percent else self.current

    def find(self, version: str, name: str | None = None) -> LoadedBundle:
        """The serving or staged version ``version``; NotFound names those there are (in
        Triton's words when asked for model or adapter ``name``)."""
        for bundle in self.versions():
            if str(bundle.version) == version:
                return bundle
        there = f"serving {self.current.version}"
        if self.candidate is not None:
            there += f", staged {self.candidate.version}"
        if name is None:
            raise NotFound(f"bundle {self.current.name!r} has no version {version!r} ({there})")
        detail = f"bundle {self.current.name!r}: {there}"
        raise NotFound(unknown_model(name, f"version {version[:40]} is not found", detail))

    def versions(self) -> list[LoadedBundle]:
        return [self.current] if self.candidate is None else [self.current, self.candidate]


def bucket(candidate: LoadedBundle, key: str | None) -> float:
    """0 <= bucket < 100 for a request key: stable for one candidate (name, version, digest),
    so a key keeps its side across restarts; a new candidate reshuffles the devices."""
    if key is None:
        return random.random() * 100
    seed = f"{candidate.name}\0{candidate.version}\0{candidate.digest}\0{key}".encode()
    return int.from_bytes(hashlib.sha256(seed).digest()[:8], "big") % 10_000 / 100


class ServingTable:
    """Bundle name → `Slot`, plus indexes from adapter and model names."""

    def __init__(self, closer: Callable[[LoadedBundle], None]) -> None:
        self._slots: dict[str, Slot] = {}
        self._adapters: dict[str, str] = {}
        self._mqtt: dict[str, str] = {}
        self._models: dict[str, str] = {}
        self._closer = closer
        # model_info per (name, version): asked on every V2 request, rebuilt only after
        # the table changes (every change goes through _reindex or abort).
        self._infos: dict[tuple[str, str | None], ModelInfo] = {}
        self._unloaded: set[str] = set()
        self.started = False

    # -- changes ----------------------------------------------------------------------

    def name_conflict(self, bundle: LoadedBundle) -> str | None:
        """Why ``bundle`` cannot be served next to the others (a taken name), or None.

        Adapter names, MQTT names and models share one namespace across bundles.
        """
        for name in claims(bundle):
            owner = self._models.get(name) or self._adapters.get(name) or self._mqtt.get(name)
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

    def abort(self, name: str) -> LoadedBundle:
        """Drop the staged candidate of ``name``; its requests in flight finish on it."""
        slot = self.slot(name)
        if slot.candidate is None:
            raise NotFound(f"bundle {name!r} has no staged version")
        candidate, slot.candidate, slot.percent = slot.candidate, None, 0
        self._infos.clear()
        self._retire(candidate)
        return candidate

    def remove(self, name: str) -> Slot:
        slot = self._slots.pop(name, None)
        if slot is None:
            raise NotFound(f"no bundle named {name!r} is installed")
        self._unloaded.difference_update(claims(slot.current))  # a new install serves them
        for version in slot.versions():
            self._retire(version)
        self._reindex()
        return slot

    def _retire(self, bundle: LoadedBundle) -> None:
        if bundle.retire():
            self._closer(bundle)

    def _reindex(self) -> None:
        self._infos.clear()
        self._adapters = {
            s.current.adapter_name: name
            for name, s in self._slots.items()
            if s.current.adapter_name is not None
        }
        self._mqtt = {
            s.current.mqtt_name: name
            for name, s in self._slots.items()
            if s.current.mqtt_name is not None
        }
        self._models = {m: name for name, s in self._slots.items() for m in s.current.models}

    # -- reads ------------------------------------------------------------------------

    def slot(self, name: str) -> Slot:
        slot = self._slots.get(name)
        if slot is None:
            raise NotFound(f"no bundle named {name!r} is installed")
        return slot

    def set_loaded(self, name: str, *, loaded: bool) -> None:
        """Serve model or adapter ``name`` again (True) or stop serving it (False)."""
        if name not in self._models and name not in self._adapters:
            raise self.unknown(name, "model or adapter")
        if loaded:
            self._unloaded.discard(name)
        else:
            self._unloaded.add(name)
        self._infos.clear()

    def is_unloaded(self, name: str) -> bool:
        return name in self._unloaded

    def _refuse_unloaded(self, name: str, version: str | None) -> None:
        if name in self._unloaded:  # Triton's words for a model with no version loaded
            what = "has no available versions" if version is None else (
                f"version {version[:40]} is not at ready state")  # fmt: skip
            detail = "unloaded through the model repository API: load it to serve it again"
            raise NotReady(unknown_model(name, what, detail))

    def unknown(self, name: str, kind: str) -> DaemonError:
        """NotFound once the start-up loading is done; before, NotReady (503, retried by
        clients and by another gateway's cloud fallback): the name may be loading now."""
        if self.started:
            return NotFound(unknown_model(name, "is not found", f"no {kind} of that name"))
        detail = "the daemon is still loading bundles"
        return NotReady(unknown_model(name, "is not found yet", detail))

    def slots(self) -> dict[str, Slot]:
        return dict(self._slots)

    def lease_adapter(
        self,
        adapter: str,
        key: str | None = None,
        version: str | None = None,
        namespace: Namespace = "http",
    ) -> LoadedBundle:
        """Lease the version that answers a request to ``adapter`` (named in ``namespace``)."""
        owner = (self._mqtt if namespace == "mqtt" else self._adapters).get(adapter)
        if owner is None:
            raise self.unknown(adapter, "adapter")
        self._refuse_unloaded(self._slots[owner].current.adapter_name or adapter, version)
        bundle = self._slots[owner].pick(key, version, adapter)
        if bundle.adapter is None:  # a staged version without an adapter
            bundle = self._slots[owner].current
        bundle.acquire()
        return bundle

    def lease_model(
        self, model: str, version: str | None, key: str | None = None
    ) -> tuple[LoadedBundle, ServedModel]:
        owner = self._models.get(model)
        if owner is None:
            raise self.unknown(model, "model")
        self._refuse_unloaded(model, version)
        slot = self._slots[owner]
        bundle = slot.pick(key, version, model)
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
        info = self._infos.get((name, version))
        if info is None:
            info = self._infos[(name, version)] = self._model_info(name, version)
        return info

    def _model_info(self, name: str, version: str | None) -> ModelInfo:
        is_model = name in self._models
        owner = self._models.get(name) if is_model else self._adapters.get(name)
        if owner is None:
            raise self.unknown(name, "model or adapter")
        slot = self._slots[owner]
        bundle = slot.current if version is None else slot.find(version, name)
        served = bundle.models.get(name) if is_model else None
        info = adapter_info(name, bundle) if served is None else served_info(served, bundle)
        if name in self._unloaded:
            return msgspec.structs.replace(info, ready=False)
        return info

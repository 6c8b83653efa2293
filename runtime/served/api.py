"""The transport-neutral service interface the bridges (HTTP, MQTT) call.

`wasmgate.runtime.serving.service.InferenceService` implements `ServiceAPI`; bridge tests may use
any object that satisfies the protocol. Times are seconds; deadlines are `time.monotonic()`
values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from wasmgate.runtime.served.timeouts import check_deadline
from wasmgate.sandbox.models import TensorSpec

Source = Literal["local", "cloud", "deferred"]
"""``deferred``: the cloud was unreachable and the request is kept to be sent when it is
back; the body says where its answer will be published (`wasmgate.runtime.field.deferral`)."""
Namespace = Literal["http", "mqtt"]
"""Which of a bundle's routes (``routes.http`` / ``routes.mqtt``) an adapter name is in."""


class AdapterRequest(msgspec.Struct, frozen=True):
    """One device payload for one adapter, as a bridge received it."""

    adapter: str
    payload: bytes
    content_type: str | None = None
    meta: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Transport facts the guest may read: ``transport``, ``topic``, ``client``, ..."""
    deadline: float | None = None
    key: str | None = None
    """Canary key: requests with the same key land on the same version while one is staged
    (None = a random draw per request)."""
    version: str | None = None
    """Pin to this serving or staged version (smoke tests); None = the split decides."""
    namespace: Namespace = "http"

    def __post_init__(self) -> None:
        if self.deadline is not None:  # the label is formatted only when there is one
            check_deadline(self.deadline, f"adapter {self.adapter!r}")


@dataclass
class AdapterAnswer:
    """The adapter's answer and how it was produced."""

    body: bytes
    content_type: str
    source: Source
    version: int
    timings: dict[str, float] = field(default_factory=dict)
    """Stage durations in seconds: ``queue``, ``sandbox``, ``inference``, ``fallback``."""
    events: list[bytes] = field(default_factory=list)
    """Payloads the adapter emitted for ``events/<adapter>``."""
    fallback_reason: str | None = None


class ModelRequest(msgspec.Struct, frozen=True):
    """Direct tensor inference on a model declared by a bundle."""

    model: str
    inputs: Mapping[str, npt.NDArray[np.generic]]
    outputs: Sequence[str] | None = None
    """Requested output names; None = all."""
    version: str | None = None
    deadline: float | None = None
    key: str | None = None
    """Canary key, as `AdapterRequest.key`."""

    def __post_init__(self) -> None:
        if self.deadline is not None:  # the label is formatted only when there is one
            check_deadline(self.deadline, f"model {self.model!r}")


@dataclass
class ModelAnswer:
    """Outputs by name, in the model's declared order (or the requested order)."""

    outputs: dict[str, npt.NDArray[np.generic]]
    source: Source
    version: int
    timings: dict[str, float] = field(default_factory=dict)


class ModelInfo(msgspec.Struct, frozen=True):
    """What `GET /v2/models/{m}` and the status page show."""

    name: str
    version: int
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int = 0
    max_queue_delay_us: int = 0
    kind: Literal["model", "adapter"] = "model"
    bundle: str = ""
    ready: bool = True
    details: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Backend facts: ``provider``, ``precision``, fallback notes."""
    mqtt_name: str | None = None
    """An adapter's name on the MQTT topic tree (``routes.mqtt``)."""


class ServiceAPI(Protocol):
    """What every bridge needs from the core."""

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        """Run one request through the adapter; raises `wasmgate.runtime.errors` types."""
        ...

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        """Direct tensor inference; raises `wasmgate.runtime.errors` types."""
        ...

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        """Metadata of a model or adapter (adapters appear with one BYTES in/out); NotFound."""
        ...

    def list_models(self) -> list[ModelInfo]:
        """Every model and adapter currently served."""
        ...

    def adapter_names(self) -> list[str]:
        """Names of adapters currently served (for MQTT subscriptions and metadata)."""
        ...

    @property
    def ready(self) -> bool:
        """True once start-up bundles are loaded and the daemon is not draining."""
        ...

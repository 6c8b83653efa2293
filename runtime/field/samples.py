"""Hard examples kept for retraining: the requests the local model was unsure about.

A sample is kept when the adapter asked for fallback (``request_fallback``: low confidence)
and, when the cloud answered too, its reason says whether the two answers disagree:

- ``low_confidence``: the adapter asked; the cloud was not asked, failed, or agreed;
- ``disagreement``: the adapter asked and the cloud's answer differs (`disagrees`).

Only if the bundle's manifest ``[samples] keep_payload = true``; then its ``rate``,
``max_per_hour`` and ``max_bytes``, each tightened (never loosened) by the config's
``[samples]`` (`SamplePolicy.of`). A kept sample is one JSON document (`SAMPLE_FIELDS`)
appended to the store's ``samples`` stream: it survives restarts, is bounded by the stream's
limits and is shipped by the one configured sink (``samples.sink``): the MQTT bridge when
connected (`wasmgate.runtime.mqtt.spool`), the cloud endpoint (`samples_http`) or an OCI
registry (`samples_oci`); it is read by ``wasmgate samples list|export``
(`wasmgate.runtime.cli.samples`).

The hourly cap counts per bundle name in the store itself (`Store.append_within`), so it
holds for the whole gateway — every worker process appends to the one file — and across a
restart; a sample the store refuses is logged and counted, and the request's answer stands
either way.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from wasmgate.runtime.field.store import Quota, Store, StoreError
from wasmgate.runtime.ops.config import SamplesSettings
from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.served.api import AdapterAnswer, AdapterRequest
from wasmgate.signing.manifest import SamplesGrant

log = logging.getLogger("wasmgate.field")
SAMPLES = "samples"
SAMPLE_FIELDS = (
    "bundle", "version", "adapter", "mqtt", "reason", "fallback_reason", "at",
    "content_type", "payload_b64", "local", "cloud",
)  # fmt: skip
"""Keys of a sample document; ``local``/``cloud`` are ``{"body_b64", "content_type",
"source"}`` (``cloud`` is null when the cloud was not asked or failed)."""
TOLERANCE = 1e-3
"""Relative tolerance under which two numbers in the answers are the same (see `disagrees`)."""
_HOUR_S = 3600.0


class SamplePolicy(msgspec.Struct, frozen=True):
    """What one bundle may keep, after the config tightened its manifest."""

    rate: float
    max_per_hour: int
    max_bytes: int

    @classmethod
    def of(cls, grant: SamplesGrant | None, conf: SamplesSettings) -> SamplePolicy | None:
        """None when nothing may be kept (no grant, ``keep_payload`` false, config off)."""
        if grant is None or not grant.keep_payload or not conf.enabled:
            return None
        per_hour = _lower(grant.max_per_hour, conf.max_per_hour)
        rate = min(grant.rate, conf.rate)
        if rate <= 0 or per_hour <= 0:
            return None
        return cls(rate, per_hour, _lower(grant.max_bytes, conf.max_bytes))


def _lower(manifest: int, config: int | None) -> int:
    return manifest if config is None else min(manifest, config)


def disagrees(local: bytes, cloud: bytes, tolerance: float = TOLERANCE) -> bool:
    """Whether two answers differ in what they decide.

    Both JSON: objects with a ``label`` compare labels; otherwise the first list of numbers
    (scores) compares argmax; otherwise numbers compare within ``tolerance`` (relative, at
    least absolute for |x| < 1) and everything else by equality. Not JSON: bytes differ."""
    try:
        a, b = json.loads(local), json.loads(cloud)
    except ValueError:
        return local != cloud
    if isinstance(a, dict) and isinstance(b, dict) and "label" in a and "label" in b:
        return bool(a["label"] != b["label"])
    sa, sb = _scores(a), _scores(b)
    if sa is not None and sb is not None:
        return _argmax(sa) != _argmax(sb)
    return not _same(a, b, tolerance)


def _scores(doc: Any) -> list[float] | None:
    if isinstance(doc, list) and doc and all(_number(x) for x in doc):
        return [float(x) for x in doc]
    if isinstance(doc, dict):
        for value in doc.values():
            found = _scores(value)
            if found is not None:
                return found
    return None


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _argmax(xs: list[float]) -> int:
    return max(range(len(xs)), key=xs.__getitem__)


def _same(a: Any, b: Any, tol: float) -> bool:
    if _number(a) and _number(b):
        return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(a)))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    return bool(a == b)


class Origin(msgspec.Struct, frozen=True):
    """The bundle a sample came from."""

    bundle: str
    version: int
    mqtt_name: str
    grant: SamplesGrant | None


class SampleKeeper(Protocol):
    async def consider(
        self, origin: Origin, req: AdapterRequest, local: AdapterAnswer, final: AdapterAnswer
    ) -> None:
        """Keep ``req`` as a hard example if its bundle and the config allow it."""
        ...


class StoredSamples:
    """Decides which hard examples to keep and appends them to the ``samples`` stream."""

    def __init__(
        self,
        store: Store,
        conf: SamplesSettings,
        *,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._conf = conf
        self._draw = draw
        self._clock = clock
        self.kept = 0
        self.skipped: dict[str, int] = {"rate": 0, "hourly": 0, "size": 0, "store": 0}

    async def consider(
        self,
        origin: Origin,
        req: AdapterRequest,
        local: AdapterAnswer,
        final: AdapterAnswer,
    ) -> None:
        """Keep the sample of ``req`` (``local`` asked for fallback, ``final`` was served)."""
        policy = SamplePolicy.of(origin.grant, self._conf)
        if policy is None:
            return  # the payload may not be kept: it is never written anywhere
        if self._draw() >= policy.rate:
            self.skipped["rate"] += 1
            return
        doc = _document(origin, req, local, final if final.source == "cloud" else None)
        if len(doc) > policy.max_bytes:
            self.skipped["size"] += 1
            return
        quota = Quota(f"samples/{origin.bundle}", policy.max_per_hour, _HOUR_S, self._clock())
        try:
            kept = await self._store.append_within(
                SAMPLES, doc, {"adapter": origin.mqtt_name}, quota
            )
        except StoreError as e:
            self.skipped["store"] += 1
            log.warning("sample of %s not kept: %s", origin.bundle, e)
            return
        if kept is None:
            self.skipped["hourly"] += 1
            return
        self.kept += 1

    def status(self) -> dict[str, object]:
        return {"kept": self.kept, "skipped": dict(self.skipped)}


def _document(
    origin: Origin, req: AdapterRequest, local: AdapterAnswer, cloud: AdapterAnswer | None
) -> bytes:
    differ = cloud is not None and disagrees(local.body, cloud.body)
    doc = {
        "bundle": origin.bundle,
        "version": origin.version,
        "adapter": req.adapter,
        "mqtt": origin.mqtt_name,
        "reason": "disagreement" if differ else "low_confidence",
        "fallback_reason": local.fallback_reason,
        "at": time.time(),
        "content_type": req.content_type,
        "payload_b64": _b64(req.payload),
        "local": _answer(local),
        "cloud": _answer(cloud) if cloud is not None else None,
    }
    return jsonio.dumps(doc)


def _answer(a: AdapterAnswer) -> dict[str, object]:
    return {"body_b64": _b64(a.body), "content_type": a.content_type, "source": a.source}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")

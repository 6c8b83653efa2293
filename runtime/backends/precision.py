"""Precision negotiation: pick the first variant of the profile's order that loads.

A bundle's model may ship ``int8``, ``bf16``, ``fp16`` and ``fp32`` files. For each precision
in the device profile's order, the variant of that name is loaded on the chosen providers;
a missing variant or a load failure moves on to the next precision, and every step is kept
in `Negotiated.attempts` (and in the model's ``notes``) so status pages can show why.

``bf16`` is a compute mode, not a tensor type: it uses the bundle's ``bf16`` file if there is
one (an fp32-typed model meant for BF16 compute) and otherwise the ``fp32`` file, loaded with
BF16 fast-math; on hosts without it the backend refuses and negotiation moves on.
Shipped variants the profile does not list are tried last, so a model never fails to load
only because the profile's list is short.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from wasmgate.device_profiles import Precision
from wasmgate.runtime.backends.base import InferenceBackend, LoadedModel, LoadOptions, ModelSpec
from wasmgate.runtime.errors import BackendError

if TYPE_CHECKING:
    from wasmgate.signing.records import VerifiedBlob

log = logging.getLogger(__name__)

VariantSource: TypeAlias = "bytes | VerifiedBlob | Callable[[], bytes | VerifiedBlob]"
"""A variant's bytes, or how to get them (the daemon: the store's verified blob, read and
hashed only when that precision is tried)."""
_LAST_RESORT: tuple[Precision, ...] = ("fp32", "fp16", "int8")


class Attempt(msgspec.Struct, frozen=True):
    """One negotiation step: which precision, from which variant file, and the outcome."""

    precision: Precision
    variant: str | None
    loaded: bool
    reason: str


@dataclass
class Negotiated:
    model: LoadedModel
    precision: Precision
    variant: str
    attempts: list[Attempt] = field(default_factory=list)

    def summary(self) -> str:
        """One line for logs and status: chosen precision and every skipped step."""
        skipped = [f"{a.precision}: {a.reason}" for a in self.attempts if not a.loaded]
        tail = f" (skipped {'; '.join(skipped)})" if skipped else ""
        providers = ",".join(self.model.providers)
        head = f"{self.model.name}: {self.precision} from variant {self.variant}"
        return f"{head} on {providers}{tail}"


def negotiate(
    backend: InferenceBackend,
    spec: ModelSpec,
    variants: Mapping[str, VariantSource],
    options: LoadOptions,
) -> Negotiated:
    """Load the best variant for ``options.profile``; `BackendError` listing every reason."""
    if not variants:
        raise BackendError(f"{spec.name}: the bundle ships no model variant")
    attempts: list[Attempt] = []
    for precision, variant, reason in _candidates(options.profile.precision, variants):
        if variant is None:
            attempts.append(Attempt(precision, None, loaded=False, reason=reason))
            continue
        model = _try(
            backend, spec, variants[variant], msgspec.structs.replace(options, precision=precision)
        )
        if isinstance(model, str):
            log.warning("model %s: %s variant %r failed: %s", spec.name, precision, variant, model)
            attempts.append(Attempt(precision, variant, loaded=False, reason=model))
            continue
        attempts.append(Attempt(precision, variant, loaded=True, reason=reason))
        return _finish(model, precision, variant, attempts)
    reasons = "; ".join(f"{a.precision}: {a.reason}" for a in attempts)
    raise BackendError(f"{spec.name}: no variant could be loaded ({reasons})")


def _candidates(
    order: list[Precision], variants: Mapping[str, VariantSource]
) -> list[tuple[Precision, str | None, str]]:
    out: list[tuple[Precision, str | None, str]] = []
    for precision in order:
        if precision in variants:
            out.append((precision, precision, "profile order"))
        elif precision == "bf16" and "fp32" in variants:
            out.append((precision, "fp32", "profile order (fp32 file, bf16 compute)"))
        else:
            out.append((precision, None, f"bundle ships no {precision} variant"))
    out.extend(
        (precision, precision, "not in the profile order; last resort")
        for precision in _LAST_RESORT
        if precision in variants and precision not in order
    )
    return out


def _try(
    backend: InferenceBackend, spec: ModelSpec, source: VariantSource, options: LoadOptions
) -> LoadedModel | str:
    data = source() if callable(source) else source
    try:
        return backend.load(data, spec, options)
    except BackendError as e:
        return str(e)


def _finish(
    model: LoadedModel, precision: Precision, variant: str, attempts: list[Attempt]
) -> Negotiated:
    failed = [f"{a.precision} skipped: {a.reason}" for a in attempts if not a.loaded]
    model.notes[:0] = [*failed, f"precision {precision} (variant {variant})"]
    model.precision = precision
    result = Negotiated(model=model, precision=model.precision, variant=variant, attempts=attempts)
    log.info("%s", result.summary())
    return result

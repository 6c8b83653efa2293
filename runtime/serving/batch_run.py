"""One batch's run: join the requests' rows, run the model once, hand each its rows back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wasmgate.runtime.backends.base import Array, LoadedModel
from wasmgate.runtime.errors import BackendError
from wasmgate.runtime.serving.batch_queue import Item
from wasmgate.sandbox.models import TensorSpec


def latest_deadline(live: Sequence[Item]) -> float | None:
    """The batch's deadline: the run is stopped only once every request in it gave up."""
    deadlines = [item.deadline for item in live]
    return None if None in deadlines else max(d for d in deadlines if d is not None)


def infer_joined(
    model: LoadedModel, outputs: Sequence[TensorSpec], live: list[Item]
) -> list[Array]:
    """Run ``live`` as one call (a single request's arrays go in as they are)."""
    rows = sum(item.rows for item in live)
    deadline = latest_deadline(live)
    if len(live) == 1:
        result = model.infer(live[0].inputs, deadline=deadline)
    else:
        columns = zip(*(item.inputs for item in live), strict=True)
        joined = [np.concatenate(col, axis=0) for col in columns]
        result = model.infer(joined, deadline=deadline)
    for spec, out in zip(outputs, result, strict=True):
        if out.shape[:1] != (rows,):
            raise BackendError(
                f"{model.name}: output {spec.name!r} has {out.shape[:1]} rows for a batch "
                f"of {rows}; cannot split it back"
            )
    return result


def resolve(live: list[Item], outputs: list[Array]) -> None:
    """Give every request its rows of the outputs, in queue order."""
    offset = 0
    for item in live:
        item.future.set_result([out[offset : offset + item.rows] for out in outputs])
        offset += item.rows


def span_attributes(name: str, live: list[Item]) -> dict[str, str | int]:
    return {
        "wasmgate.model": name,
        "wasmgate.batch.size": sum(item.rows for item in live),
        "wasmgate.batch.requests": len(live),
    }

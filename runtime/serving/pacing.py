"""`Pacer`: when a batcher's queued requests should start, and how large a batch pays.

Two measurements per batched model, both moving averages: the gap between arrivals, and
the run time per row of each batch-size bucket (powers of two: rows 4..7 are bucket 4).
From them two decisions, both recomputed at every dispatcher scan:

- `limit`, the most rows one batch takes. A bigger bucket is used only when its measured
  per-row cost is within `PAYS` of the best measured one — preferring the smallest such
  bucket. On 2 CPU cores a conv net's per-image cost does not fall (often rises) with the
  batch, since ONNX Runtime already fills the cores at batch 1; a GEMM-bound MLP's falls
  several-fold. The bucket just above the choice is allowed while it is unmeasured (that
  is how it gets measured) and again every `PROBE_EVERY` batches, since load and inputs
  change.
- `delay`, how long the oldest queued request waits for companions: 0 unless companions
  are expected within ``max_delay`` (mean gap < ``max_delay``) *and* a companion arrives
  sooner than the run time it saves (gap < per-row cost at batch 1 - per-row cost at the
  limit); then the time the missing rows take to arrive, capped by ``max_delay``. With
  nothing measured yet it is 0: a lone request never waits on a guess.

Plain arithmetic on times the caller passes in (``time.monotonic()`` values): no clock, no
lock; the batcher calls it under its dispatcher's lock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

ARRIVALS = 33
"""Arrival times kept to measure the rate (32 gaps)."""
GAIN = 0.5
"""Batching is on only when some batch size measures at most this share of batch 1's
per-row cost: smaller gains are within what a shared machine's noise and the overlap of
side-by-side batch-1 runs give an unbatched model anyway."""
PAYS = 0.95
"""Of the batch sizes that pay, the largest within 1/`PAYS` of the best is used (fewer
batches: less of the per-batch work the model's run time does not show)."""
PROBE_EVERY = 128
"""Runs after which a bucket not measured since is tried again."""
QUIET = 2.0
"""A batch waiting for companions starts once no request arrived for this many mean gaps."""


def bucket(rows: int) -> int:
    """The power of two at or below ``rows`` (≥ 1)."""
    return 1 << (max(1, rows).bit_length() - 1)


@dataclass
class _Cost:
    run: int
    """The pacer's run count when this bucket was last measured."""
    per_row: float
    """The least run seconds per row measured. Other processes only ever add time to a
    run: on a shared machine the least sample is the one nearest the model's own cost,
    and buckets are compared on their own costs, not on when each happened to run."""


class Pacer:
    """Arrival and cost measurements of one batcher and the decisions drawn from them."""

    def __init__(self, max_batch: int, max_delay: float) -> None:
        self.max_batch = max_batch
        self.max_delay = max_delay
        self._arrivals: deque[float] = deque(maxlen=ARRIVALS)
        self.runs = 0
        self._probed = 0  # run count when a batch of ≥ 2 rows last ran
        self._costs: dict[int, _Cost] = {}

    def arrived(self, now: float) -> None:
        """Count one request's arrival at ``now``."""
        self._arrivals.append(now)

    @property
    def last_arrival(self) -> float | None:
        return self._arrivals[-1] if self._arrivals else None

    def gap(self, now: float) -> float | None:
        """The mean seconds between the recent arrivals, the silence since the last one
        included (None before the second arrival). A window, not a moving average of
        gaps: closed-loop callers come in bursts, and the first request after a pause —
        the one deciding whether to wait — would see the pause weigh most."""
        if len(self._arrivals) < 2:
            return None
        return (max(now, self._arrivals[-1]) - self._arrivals[0]) / (len(self._arrivals) - 1)

    def ran(self, rows: int, seconds: float, concurrent: int = 1) -> None:
        """Count one successful run of ``rows`` rows that took ``seconds`` while
        ``concurrent`` runs of the model (itself included) were in flight."""
        self.runs += 1
        if rows > 1:
            self._probed = self.runs
        # Only a run that had the model to itself says what a batch size costs: runs side
        # by side share the cores in proportions no count of them tells.
        if concurrent != 1 or not 1 <= rows <= self.max_batch:
            return
        per_row = seconds / rows
        cost = self._costs.setdefault(bucket(rows), _Cost(self.runs, per_row))
        cost.per_row = min(cost.per_row, per_row)
        cost.run = self.runs

    def per_row(self, size: int) -> float | None:
        """The measured per-row seconds of ``size``'s bucket (None: not measured)."""
        cost = self._costs.get(bucket(size))
        return None if cost is None else cost.per_row

    def chosen(self) -> int:
        """The bucket batches are formed up to: 1 = batching measurably does not pay."""
        one = self.per_row(1)
        bigger = {b: c.per_row for b, c in self._costs.items() if b > 1}
        if one is None or not bigger:
            return bucket(self.max_batch)  # nothing to compare yet: let batches form
        best = min(bigger.values())
        if best > GAIN * one:
            return 1
        return max(b for b, per_row in bigger.items() if per_row * PAYS <= best)

    def probing(self) -> bool:
        """No batch of ≥ 2 rows ran for `PROBE_EVERY` runs: while passing through, time to
        see again whether batching pays (load and inputs change)."""
        return self.max_batch > 1 and self.runs - self._probed >= PROBE_EVERY

    def limit(self) -> int:
        """The most rows worth joining into one batch now."""
        chosen = self.chosen()
        if chosen == 1:
            return self.max_batch if self.probing() else 1
        if self._due(2 * chosen):  # the next size up: unmeasured, or not for a while
            chosen *= 2
        return min(self.max_batch, 2 * chosen - 1)

    def _due(self, size: int) -> bool:
        cost = self._costs.get(size)
        if size > self.max_batch:
            return False
        return cost is None or self.runs - cost.run >= PROBE_EVERY

    def passthrough(self) -> bool:
        """Batching measurably does not pay: callers run batch 1 side by side, as an
        unbatched model's callers do (not while big batches are due to be measured)."""
        return 1 in self._costs and self.chosen() == 1 and not self.probing()

    def delay(self, rows: int, limit: int, now: float) -> float:
        """Seconds the oldest of ``rows`` queued rows should wait for companions."""
        gap = self.gap(now)
        if rows >= limit or gap is None or gap >= self.max_delay:
            return 0.0
        chosen = self.chosen()  # the bucket that measurably pays (limit may be a probe)
        one, full = self.per_row(1), self.per_row(chosen)
        if one is None or full is None or chosen == 1 or gap >= one - full:
            return 0.0
        return min(self.max_delay, gap * (limit - rows))

    def ready_at(self, first_arrived: float, rows: int, limit: int, now: float) -> float | None:
        """When a batch whose oldest request arrived at ``first_arrived`` should start;
        None = at once (no wait for companions)."""
        wait = self.delay(rows, limit, now)
        gap, last = self.gap(now), self.last_arrival
        if wait <= 0 or gap is None or last is None:
            return None
        return min(first_arrived + wait, last + QUIET * gap)

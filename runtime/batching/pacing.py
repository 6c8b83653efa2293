"""`Pacer`: when a batcher's queued requests should start, and how large a batch pays.

Two measurements per batched model: the recent arrival times, and the least run time per
row seen for each batch-size bucket (powers of two: rows 4..7 are bucket 4). From them, at
every arrival and dispatcher scan:

- whether batching pays at all (`chosen` > 1): only when some bucket's per-row cost is at
  most `GAIN` of batch 1's. On 2 CPU cores a conv net's per-image cost does not fall (often
  rises) with the batch, since ONNX Runtime already fills the cores at batch 1; a GEMM-bound
  MLP's falls five- to tenfold. When it does not, callers *pass through*: each runs batch
  1 side by side with the others, as an unbatched model's callers do. Batches may form
  during the first `FIRST_PROBE` runs (a burst measures one at once) and, when none pays
  or none formed, every `PROBE_EVERY` runs, to measure again.
- `limit`, the most rows one batch takes: the largest bucket within 1/`PAYS` of the best
  per-row cost, or the bucket above it while that one is unmeasured or not measured for
  `PROBE_EVERY` runs.
- `delay`, how long the oldest queued request waits for companions: 0 unless batching pays,
  companions are expected within ``max_delay`` (mean gap < ``max_delay``) *and* one arrives
  sooner than the model time it saves (gap < per-row cost at batch 1 - at the chosen
  bucket); then the time the missing rows take to arrive, capped by ``max_delay`` and cut
  short once the stream pauses (`QUIET` gaps without an arrival).

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
per-row cost. Smaller gains are within a shared machine's noise, and side-by-side batch-1
runs (what an unbatched model gets) take more of a loaded machine's CPU than one worker."""
PAYS = 0.95
"""Of the batch sizes that pay, the largest within 1/`PAYS` of the best is used (fewer
batches: less of the per-batch work the model's run time does not show)."""
FIRST_PROBE = 16
"""Dispatcher runs after which a probe that formed no batch gives up (requests do not
overlap: at one or two callers a batch rarely forms)."""
PROBE_ROWS = 8
"""A probe ends once it measured a batch of at least this many rows (or ``max_batch``): a
GEMM-bound model's gain shows clearly from 8 rows, at 2-4 it is within noise."""
PROBE_EVERY = 1024
"""Runs after which a bucket not measured since is tried again."""
PROBE_MAX = 64 * PROBE_EVERY
"""Probes that find no gain come at doubling intervals, up to this many runs apart (a probe
of a conv net queues every caller behind one slow batch)."""
QUIET = 2.0
ONE_SAMPLES = 4
"""Runs of batch 1 before a batch may be found to pay against it. Its first runs after a
load are several times slower than the rest (ORT's arena and thread pool warming up): a
batch compared with two of them looked like a 3.5x gain on a conv net that has none, and
once batches formed, batch 1 was never measured again (measured: half the throughput)."""
"""A batch waiting for companions starts once no request arrived for this many mean gaps."""


def bucket(rows: int) -> int:
    """The power of two at or below ``rows`` (≥ 1)."""
    return 1 << (max(1, rows).bit_length() - 1)


@dataclass
class _Cost:
    run: int
    """The pacer's run count when this bucket was last measured."""
    samples: int
    """Runs measured; the first of a batch size is not trusted (ONNX Runtime sizes its
    buffers for a new shape on that run, several times its usual cost)."""
    per_row: float
    """The least run seconds per row seen. Other processes and side-by-side runs only ever
    add time to a run: the least sample is the one nearest the model's own cost, and
    buckets are compared on their own costs, not on how busy the machine was meanwhile."""


class Pacer:
    """Arrival and cost measurements of one batcher and the decisions drawn from them."""

    def __init__(self, max_batch: int, max_delay: float) -> None:
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.runs = 0
        self._next_probe = 0  # run count from which batches may form to be measured
        self._probe_runs = 0  # dispatcher runs of the current probe
        self._arrivals: deque[float] = deque(maxlen=ARRIVALS)
        self._costs: dict[int, _Cost] = {}
        self._chosen = 1  # chosen(), recomputed after every run
        self._batch_trusted = False  # some batch size (> 1) has a trusted cost
        self._probe_every = PROBE_EVERY

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

    def ran(self, rows: int, seconds: float, *, queued: bool = True) -> None:
        """Count one successful run of ``rows`` rows that took ``seconds`` (``queued``:
        a dispatcher batch, not a caller's run on its own thread)."""
        probing = self.probing()
        self.runs += 1
        trusted = False
        if 1 <= rows <= self.max_batch:  # (an oversized request ran alone, unsplit)
            trusted = self._measure(bucket(rows), seconds / rows)
            trusted = trusted and rows >= min(PROBE_ROWS, self.max_batch)
        self._chosen = self._choose()
        if self._chosen > 1:
            self._probe_every = PROBE_EVERY
        if not probing:
            return
        self._probe_runs += queued
        # A probe ends once it measured a batch of PROBE_ROWS (or formed none in
        # FIRST_PROBE batches: requests do not overlap); finding no gain, the next comes
        # twice as late.
        if trusted or self._probe_runs >= FIRST_PROBE:
            if self._chosen == 1 and self.runs > FIRST_PROBE:
                self._probe_every = min(2 * self._probe_every, PROBE_MAX)
            self._next_probe, self._probe_runs = self.runs + self._probe_every, 0

    def _measure(self, size: int, per_row: float) -> bool:
        """Add one sample; True when the bucket's cost is trusted now."""
        cost = self._costs.get(size)
        if cost is None:
            self._costs[size] = _Cost(self.runs, 1, per_row)
            return False
        cost.per_row = per_row if cost.samples == 1 else min(cost.per_row, per_row)
        cost.samples += 1
        cost.run = self.runs
        self._batch_trusted = self._batch_trusted or size > 1
        return True

    def per_row(self, size: int) -> float | None:
        """The least per-row seconds seen in ``size``'s bucket (None: not measured, or
        only once)."""
        cost = self._costs.get(bucket(size))
        return None if cost is None or cost.samples < 2 else cost.per_row

    def chosen(self) -> int:
        """The bucket batches are formed up to: 1 = batching does not (yet) pay."""
        return self._chosen

    def _choose(self) -> int:
        one = self.per_row(1)
        if one is None or self._costs[1].samples < ONE_SAMPLES:
            return 1
        bigger = {b: c.per_row for b, c in self._costs.items() if b > 1 and c.samples > 1}
        if not bigger or min(bigger.values()) > GAIN * one:
            return 1
        best = min(bigger.values())
        return max(b for b, per_row in bigger.items() if per_row * PAYS <= best)

    def probing(self) -> bool:
        """Batching does not pay as far as measured, and it is time to measure a batch:
        the queue may form one up to ``max_batch`` (from the first run on: no cost known)."""
        return self._chosen == 1 and self.max_batch > 1 and self.runs >= self._next_probe

    def measuring(self) -> bool:
        """A batch run now is to be measured (no batch cost known yet, or a probe): it
        should run alone, not beside callers' own runs."""
        return not self._batch_trusted or self.probing()

    def passthrough(self) -> bool:
        """Callers run batch 1 side by side, as an unbatched model's callers do."""
        return self._chosen == 1 and not self.probing()

    def limit(self) -> int:
        """The most rows worth joining into one batch now."""
        chosen = self._chosen
        if chosen == 1:  # a probe's batch: big enough to show a gain, small enough not
            # to hold every caller long behind a conv net's slow batch
            return min(self.max_batch, 2 * PROBE_ROWS - 1) if self.probing() else 1
        if self._one_due():  # batch 1 itself, to compare with again (see ONE_SAMPLES)
            return 1
        if self._due(2 * chosen):  # the next size up: unmeasured, or not for a while
            chosen *= 2
        return min(self.max_batch, 2 * chosen - 1)

    def _one_due(self) -> bool:
        """Batch 1 is to be measured again: soon after batching was chosen on a few samples
        of it (a slow start, another process's moment), then every `PROBE_EVERY` runs."""
        cost = self._costs.get(1)
        if cost is None:
            return True
        return self.runs - cost.run >= min(PROBE_EVERY, 16 * cost.samples)

    def _due(self, size: int) -> bool:
        cost = self._costs.get(size)
        if size > self.max_batch:
            return False
        return cost is None or cost.samples < 2 or self.runs - cost.run >= PROBE_EVERY

    def delay(self, rows: int, limit: int, now: float) -> float:
        """Seconds the oldest of ``rows`` queued rows should wait for companions."""
        gap = self.gap(now)
        if rows >= limit or gap is None or gap >= self.max_delay or self._chosen == 1:
            return 0.0
        one, full = self.per_row(1), self.per_row(self._chosen)
        if one is None or full is None or gap >= one - full:
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

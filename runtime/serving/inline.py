"""Which direct model calls run inline on the event loop instead of hopping to a worker.

For a model whose inference takes tens of microseconds, the hop to the worker pool (queue,
condition variable, thread wake-up, ``call_soon_threadsafe`` back, a loop wake-up) costs
more than the inference itself. `InlinePolicy` keeps, per served model, a moving average
of the measured ``infer`` time (wherever it ran) and lets a call run inline only when:

- the model has been measured (its first ``_WARMUP`` calls go to the pool), and its average
  is under ``cap_s`` (default 200 µs): the loop never stalls for long, so every other client
  stays served; a model that gets slower (bigger inputs, a loaded machine) goes back to the
  pool by itself as its average rises;
- the request's inputs are no larger than ``max_bytes``: a tiny model fed one huge batch
  must not run on the loop on the strength of its small-input average;
- the worker pool has nothing queued: an inline call never overtakes a job the fair
  scheduler has already ordered (admission still applies before either path).

Adapters (key ``adapter:<name>``) may run inline too, under the same rules plus those of
`wasmgate.runtime.serving.guest_run` (no state granted, no batched model, a short inline
budget after which the run is thrown away and made again on the pool). A run that went
past its budget is a ``strike``: the adapter goes back to the pool for a warm-up twice as
long as the last one (up to ``_WARMUP * 2**_MAX_STRIKES`` calls), so a guest that is fast
only some of the time stalls the loop once per that many requests at most, and a machine
that stalled once (a preempted vCPU) does not lose inline runs for good.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CAP_S = 200e-6
ADAPTER_CAP_S = 1e-3
"""The adapters' cap (their own policy): a guest run measured on the pool includes the hop's
GIL contention with the loop (a 100 µs run there reads as 300-500 µs), which is the very
cost running it inline removes; the inline budget still bounds any single run. With other
requests in the service (``crowded``) the cap (``CROWDED_ADAPTER_CAP_S``) is read against
the runs measured *inline*, since the pool's figure is inflated by the very concurrency, and
an adapter not (or no longer) measured under it runs inline once every ``_PROBE_EVERY``
crowded calls, even past a busy pool, to be measured again: otherwise one strike under load
(a preempted vCPU) would leave it on the pool, whose queue then keeps it there."""
CROWDED_ADAPTER_CAP_S = ADAPTER_CAP_S
"""Measured (digits, 8 connections): 300 µs and 500 µs both sent the tiny adapter back to
the pool (~600 req/s) once the pool's contention inflated its inline runs too; at 1 ms it
stays on the loop (~1300 req/s). A guest of most of a millisecond may do better on the
workers' two cores under concurrency: a lower value trades that against this loop."""
DEFAULT_MAX_BYTES = 64 * 1024
INLINE_BUDGET_S = 0.005
"""How long an adapter run on the loop may take before it is thrown away and made again
on the pool (the loop stalls at most this plus one epoch tick, once per strike)."""
_WARMUP = 8
_EWMA = 0.1
_MAX_STRIKES = 6
_PROBE_EVERY = 16
_CLIP = 4.0
"""A sample counts at most this many times the average so far. One run preempted for
milliseconds (wrk and the daemon share 2 vCPUs) used to lift a 20 µs model's average past
the cap; on the pool its runs then measured the GIL hand-back too (milliseconds) and it
stayed there: 17 % of one 8-connection round hopped, at 20 % fewer req/s. A model that really got
slower still crosses the cap in ~10-25 samples (+30 % per sample at most)."""


@dataclass
class _Measured:
    calls: int = 0
    average_s: float = 0.0
    strikes: int = 0
    inline_runs: int = 0
    inline_n: int = 0  # samples in inline_s (0 again after a strike)
    inline_s: float = 0.0  # average of the runs made inline


def _moved(average: float, sample: float, *, first: bool) -> float:
    """The moving average after ``sample``, clipped at ``_CLIP`` times the average so far."""
    if first:
        return sample
    return average + _EWMA * (min(sample, _CLIP * average) - average)


class InlinePolicy:
    """Per-model latency averages and the inline decision (owned by the service)."""

    def __init__(
        self,
        cap_s: float = DEFAULT_CAP_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        crowded_cap_s: float | None = None,
        budget_s: float = INLINE_BUDGET_S,
    ) -> None:
        """``cap_s`` 0 turns inline execution off; ``crowded_cap_s`` (default ``cap_s``)
        applies instead when the caller says other requests are in flight; ``budget_s``
        bounds one adapter run on the loop (`guest_run.inline_run`)."""
        self.cap_s = cap_s
        self.budget_s = budget_s
        self.crowded_cap_s = cap_s if crowded_cap_s is None else min(cap_s, crowded_cap_s)
        self.max_bytes = max_bytes
        self._models: dict[str, _Measured] = {}

    def inline(self, model: str, nbytes: int, pool_busy: bool, *, crowded: bool = False) -> bool:
        """True when this call should run on the loop (see the module doc)."""
        m = self._models.get(model)
        if m is None or m.calls < _WARMUP or nbytes > self.max_bytes:
            return False
        inline_s = m.inline_s if m.inline_n else float("inf")
        if not crowded:
            return not pool_busy and min(inline_s, m.average_s) < self.cap_s
        if inline_s < self.crowded_cap_s:
            return not pool_busy
        # Not (or no longer) measured under the cap inline: every _PROBE_EVERY-th call
        # measures it there again — even past a busy pool, which is where a strike under
        # load leaves it (the pool's own figure is inflated by the very concurrency) —
        # unless it was slow inline too (its last inline figure, kept across a strike).
        last = m.inline_s if m.inline_runs else float("inf")
        return min(last, m.average_s) < self.cap_s and m.calls % _PROBE_EVERY == 0

    def record(self, model: str, seconds: float, *, inline: bool = False) -> None:
        """One measured ``infer`` of ``model`` (``inline`` or in the pool)."""
        m = self._models.get(model)
        if m is None:  # not setdefault: that builds a _Measured on every call
            m = self._models[model] = _Measured()
        m.average_s = _moved(m.average_s, seconds, first=m.calls == 0)
        m.calls += 1
        if inline:
            m.inline_runs += 1
            m.inline_s = _moved(m.inline_s, seconds, first=m.inline_n == 0)
            m.inline_n += 1

    def strike(self, key: str, seconds: float) -> None:
        """A call of ``key`` ran past its inline budget (``seconds``): the pool again, for
        a warm-up of ``_WARMUP * 2**strikes`` measured calls, capped (see the module doc)."""
        m = self._models.setdefault(key, _Measured())
        m.strikes += 1
        m.calls = _WARMUP - _WARMUP * 2 ** min(m.strikes, _MAX_STRIKES)
        m.average_s = max(m.average_s, seconds)
        m.inline_n = 0  # measured again from the next inline run (inline_s kept till then)

    def back_off(self, key: str) -> None:
        """A run of ``key`` on the loop was thrown away for a reason other than its time (a
        batched model call that would have waited): the pool for a plain warm-up, no strike."""
        m = self._models.get(key)
        if m is not None:
            m.calls = min(m.calls, 0)

    def figures(self) -> dict[str, tuple[int, int]]:
        """Per key: (calls run inline, strikes) so far, for metrics and tests."""
        return {k: (m.inline_runs, m.strikes) for k, m in self._models.items()}

    def forget(self, model: str) -> None:
        """Drop a model's measurements (it was unloaded or replaced)."""
        self._models.pop(model, None)

    def average_s(self, model: str) -> float | None:
        m = self._models.get(model)
        return None if m is None or m.calls == 0 else m.average_s

"""The pacing decisions on explicit times and run costs (no clock, no threads)."""

from __future__ import annotations

import pytest

from wasmgate.runtime.batching.pacing import (
    FIRST_PROBE,
    ONE_SAMPLES,
    PROBE_EVERY,
    QUIET,
    Pacer,
    bucket,
)

MS = 1e-3


def _arrivals(pacer: Pacer, start: float, gap: float, count: int = 33) -> float:
    """``count`` arrivals ``gap`` apart from ``start``; the last one's time."""
    for i in range(count):
        pacer.arrived(start + i * gap)
    return start + (count - 1) * gap


def _twice(pacer: Pacer, rows: int, seconds: float) -> None:
    """A batch size's first run is not trusted (ORT sizes its buffers for the shape)."""
    pacer.ran(rows, 10 * seconds)
    pacer.ran(rows, seconds)


def _batch_one(pacer: Pacer, seconds: float) -> None:
    """Batch 1 measured as often as a batch needs to be compared with it (the first slow)."""
    _twice(pacer, 1, seconds)
    for _ in range(ONE_SAMPLES - 2):
        pacer.ran(1, seconds)


def _gemm_like(pacer: Pacer) -> None:
    """Costs of a GEMM-bound model: per row, batch 16 is ~7x cheaper than batch 1."""
    _batch_one(pacer, 0.15 * MS)
    _twice(pacer, 8, 0.30 * MS)
    _twice(pacer, 16, 0.32 * MS)
    _twice(pacer, 32, 0.90 * MS)


def _conv_like(pacer: Pacer) -> None:
    """Costs of a conv net on 2 cores: per row, bigger batches are no cheaper."""
    _twice(pacer, 1, 1.6 * MS)
    _twice(pacer, 2, 3.7 * MS)
    _twice(pacer, 8, 14.0 * MS)


def test_buckets_are_powers_of_two() -> None:
    assert [bucket(n) for n in (1, 2, 3, 4, 7, 8, 31, 32)] == [1, 2, 2, 4, 4, 8, 16, 32]


def test_with_nothing_measured_a_request_never_waits_and_batches_may_form() -> None:
    pacer = Pacer(32, 2 * MS)
    assert pacer.limit() == 15  # a probe: up to 15 rows
    assert pacer.delay(1, 32, 0.0) == 0.0
    _arrivals(pacer, 0.0, 0.01 * MS)  # a flood, but no cost known: no wait on a guess
    assert pacer.delay(1, 32, 0.33 * MS) == 0.0
    assert not pacer.passthrough()


def test_the_delay_is_zero_at_a_low_arrival_rate_and_grows_under_load() -> None:
    pacer = Pacer(32, 2 * MS)
    _gemm_like(pacer)
    limit = pacer.limit()
    assert limit == 31  # batch 16's bucket pays best; 32 measured just now, a bit worse
    last = _arrivals(pacer, 0.0, 10 * MS)  # one request per 10 ms: none comes in 2 ms
    assert pacer.delay(1, limit, last) == 0.0
    assert pacer.ready_at(last, 1, limit, last) is None
    last = _arrivals(pacer, 1.0, 0.02 * MS)  # every 20 µs: companions within the delay
    wait = pacer.delay(1, limit, last)
    assert wait == pytest.approx(0.02 * MS * 30)
    heavier = _arrivals(pacer, 2.0, 0.05 * MS)
    assert pacer.delay(1, limit, heavier) == pytest.approx(0.05 * MS * 30)
    assert pacer.delay(1, limit, heavier) > wait > 0  # a longer gap: longer to fill
    _arrivals(pacer, 3.0, 1 * MS)  # a companion per ms: each saves less than it costs
    assert pacer.delay(1, limit, 3.032) == 0.0
    assert pacer.delay(limit, limit, 3.032) == 0.0  # a full batch never waits


def test_the_delay_never_exceeds_max_delay() -> None:
    pacer = Pacer(32, 0.1 * MS)
    _gemm_like(pacer)
    last = _arrivals(pacer, 0.0, 0.02 * MS)
    assert pacer.delay(1, pacer.limit(), last) == pytest.approx(0.1 * MS)


def test_a_waiting_batch_starts_once_the_stream_pauses() -> None:
    pacer = Pacer(32, 2 * MS)
    _gemm_like(pacer)
    last = _arrivals(pacer, 0.0, 0.02 * MS)
    when = pacer.ready_at(last, 1, pacer.limit(), last)
    assert when == pytest.approx(last + QUIET * 0.02 * MS)  # not the full 0.6 ms wait


def test_conv_like_costs_pass_through_then_probe_again() -> None:
    pacer = Pacer(32, 2 * MS)
    _conv_like(pacer)
    assert pacer.chosen() == 1
    assert pacer.limit() == 1
    assert pacer.passthrough()
    assert pacer.delay(1, 1, 0.0) == 0.0
    for _ in range(PROBE_EVERY):
        pacer.ran(1, 6.4 * MS)  # side by side with three others: slower, the least stands
    assert pacer.per_row(1) == pytest.approx(1.6 * MS)
    assert pacer.probing()  # no batch for a while: let one form to see whether it pays now
    assert (pacer.limit(), pacer.passthrough()) == (15, False)
    pacer.ran(16, 4.8 * MS)  # batch 16 now pays (the input mix changed)
    assert pacer.chosen() == 1  # (a first sample of a size is not trusted)
    pacer.ran(16, 4.8 * MS)
    assert not pacer.probing()
    assert pacer.chosen() == 16
    assert pacer.limit() == 32  # and the next bucket up is worth a try


def test_the_least_sample_of_a_bucket_is_its_cost() -> None:
    pacer = Pacer(8, 2 * MS)
    pacer.ran(40, 1 * MS)  # oversized: ran alone, unsplit; not a batching choice
    assert pacer.per_row(1) is None
    pacer.ran(1, 50 * MS)  # the first run of a shape: not trusted
    assert pacer.per_row(1) is None
    pacer.ran(1, 2 * MS)
    pacer.ran(1, 9 * MS)  # a shared machine's slow moment does not raise it
    assert pacer.per_row(1) == pytest.approx(2 * MS)
    assert pacer.runs == 4


def test_a_probe_that_forms_no_batch_gives_up_and_callers_pass_through() -> None:
    pacer = Pacer(32, 2 * MS)
    assert (pacer.limit(), pacer.passthrough()) == (15, False)  # probing from the start
    for _ in range(FIRST_PROBE - 1):
        pacer.ran(1, 1 * MS)  # requests never overlapped: no batch formed
    assert (pacer.limit(), pacer.passthrough()) == (15, False)
    pacer.ran(1, 1 * MS, queued=False)  # callers' own runs do not use the probe up
    pacer.ran(1, 1 * MS)
    assert (pacer.limit(), pacer.passthrough()) == (1, True)  # the probe gave up
    while not pacer.probing():
        pacer.ran(1, 1 * MS, queued=False)
    assert pacer.runs == FIRST_PROBE + 1 + 2 * PROBE_EVERY  # the next, twice as late
    pacer.ran(2, 1 * MS)  # a small batch does not end it: its gain is within noise
    assert pacer.probing()
    _twice(pacer, 8, 8 * MS)  # 8 rows, no cheaper per row than batch 1
    assert (pacer.limit(), pacer.passthrough()) == (1, True)


def test_probes_that_find_no_gain_come_half_as_often() -> None:
    pacer = Pacer(32, 2 * MS)
    _conv_like(pacer)

    def runs_to_next_probe() -> int:
        count = 0
        while not pacer.probing():
            pacer.ran(1, 1.6 * MS)
            count += 1
        pacer.ran(8, 14.0 * MS)  # the probe's batch: still no gain
        return count

    first, second = runs_to_next_probe(), runs_to_next_probe()
    assert first <= PROBE_EVERY
    assert second == 2 * PROBE_EVERY
    assert pacer.passthrough()


def test_a_batch_is_not_compared_with_batch_ones_first_slow_runs() -> None:
    # Measured on a conv net at 2 clients: batch 1 run twice while ORT warmed up (5 ms a
    # row), then batches of 2 at 1.3 ms a row looked like a 3.9x gain and stayed chosen.
    pacer = Pacer(32, 2 * MS)
    pacer.ran(1, 50 * MS)
    pacer.ran(1, 5 * MS)
    _twice(pacer, 2, 2.6 * MS)
    assert pacer.chosen() == 1
    for _ in range(ONE_SAMPLES):
        pacer.ran(1, 1.4 * MS)  # warm: batch 2 (1.3 ms a row) is no gain over this
    assert pacer.chosen() == 1


def test_while_batching_pays_batch_one_is_measured_again() -> None:
    pacer = Pacer(32, 2 * MS)
    _gemm_like(pacer)
    assert (pacer.chosen(), pacer.limit()) == (16, 31)
    for _ in range(PROBE_EVERY):
        pacer.ran(16, 0.32 * MS)
    assert pacer.limit() == 1  # one lone request, to compare with again
    pacer.ran(1, 0.15 * MS)
    assert pacer.limit() == 32  # then the size above, not measured for as long either

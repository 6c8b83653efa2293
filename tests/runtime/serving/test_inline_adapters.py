"""Tiny adapters run inline on the event loop; a run past its inline budget is thrown away and
made again on the pool, adapters that keep state never run inline, and those calling a
batched model run inline while the batcher starts their calls at once.

Real signed bundles, the real ``probe`` guest in wasmtime, real ONNX Runtime (see `open_stack`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.waits import until_async
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import Stack, open_stack
from wasmgate.runtime.errors import DeadlineExceeded
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.runtime.serving.inline import INLINE_BUDGET_S, InlinePolicy

KEY = "adapter:probe"
UNBATCHED: dict[str, Any] = {"batching": {"max_batch_size": 1}}
WARMUP = 8  # InlinePolicy's measured calls before the first inline run


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


SURE_BUDGET_S = 0.1
"""An inline budget these tiny runs never reach, however loaded the machine: with the
daemon's 5 ms one, a run preempted by two busy loops beside the suite struck once (5.9 ms)."""


def _stack(
    tmp_path: Path, kit: BundleKit, bundle: Path, budget_s: float = SURE_BUDGET_S, **kw: Any
) -> Any:
    # A cap and a budget no machine misses: which runs go inline must not depend on load.
    policy = InlinePolicy(1.0, budget_s=budget_s)
    return open_stack(tmp_path, kit, start=(bundle,), inline_adapters=policy, **kw)


def _req(payload: bytes, deadline_s: float = 30.0) -> AdapterRequest:
    return AdapterRequest("probe", payload, deadline=time.monotonic() + deadline_s)


def _figures(st: Stack) -> tuple[int, int]:
    return st.service.inline_figures().get(KEY, (0, 0))


async def _warm(st: Stack, n: int = WARMUP) -> None:
    for i in range(n):
        assert (await st.service.run_adapter(_req(b"P%d" % i))).body == b"v1:%d" % i


async def test_a_tiny_adapter_runs_inline_with_the_same_answers(
    tmp_path: Path, kit: BundleKit
) -> None:
    async with _stack(tmp_path, kit, kit.build("probe", 1, **UNBATCHED)) as st:
        await _warm(st)
        assert _figures(st) == (0, 0)  # measured on the pool first
        for payload, body in ((b"M", b"v1:2,4,6,8"), (b"Pabc", b"v1:abc")):
            answer = await st.service.run_adapter(_req(payload))
            assert (answer.body, answer.source) == (body, "local")
        assert (await st.service.run_adapter(_req(b"Xev"))).events == [b"ev"]
        assert _figures(st) == (3, 0)
        text = st.metrics.exposition()[0].decode()
        assert 'wasmgate_inline_runs_total{name="adapter:probe"} 3.0' in text
        assert 'wasmgate_inline_strikes_total{name="adapter:probe"} 0.0' in text


async def test_a_run_past_the_budget_is_made_again_on_the_pool(
    tmp_path: Path, kit: BundleKit
) -> None:
    # The adapter's own deadline far above the spin below, however slow the machine runs it.
    bundle = kit.build("probe", 1, **UNBATCHED, sections={"limits": {"deadline_ms": 20_000}})
    async with _stack(tmp_path, kit, bundle) as st:
        await _warm(st)
        # A loaded CI machine can measure the first pool runs over the cap: warm until the
        # adapter runs inline (what this test starts from), then push it past the budget.
        for _ in range(8 * WARMUP):
            if _figures(st)[0] > 0:
                break
            await _warm(st, 1)
        runs, strikes = _figures(st)
        assert (runs > 0, strikes) == (True, 0)
        # 3e9 additions (about a second here): far past the budget, well inside the deadline.
        answer = await st.service.run_adapter(_req(b"W3000"))
        assert answer.body == b"v1:3000"  # the pool's run answered; the inline one was dropped
        assert _figures(st) == (runs, 1)
        await _warm(st, 2 * WARMUP - 1)  # a warm-up twice as long, on the pool
        assert _figures(st) == (runs, 1)
        await _warm(st, 1)
        assert _figures(st) == (runs + 1, 1)  # and inline again
        text = st.metrics.exposition()[0].decode()
        assert 'wasmgate_inline_strikes_total{name="adapter:probe"} 1.0' in text


async def test_a_guest_that_never_ends_gets_its_whole_deadline_and_the_loop_keeps_going(
    tmp_path: Path, kit: BundleKit
) -> None:
    bundle = kit.build("probe", 1, **UNBATCHED)
    async with _stack(tmp_path, kit, bundle, budget_s=INLINE_BUDGET_S) as st:  # the real one
        await _warm(st)
        gaps: list[float] = []

        async def heartbeat() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.001)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await st.service.run_adapter(_req(b"L", deadline_s=1.0))
        took = time.monotonic() - started
        # Meanwhile another client is served (on the pool: the adapter has a strike).
        assert (await st.service.run_adapter(_req(b"Pok"))).body == b"v1:ok"
        beat.cancel()
        assert took >= 0.9  # not cut at the inline budget: the request's own deadline
        assert _figures(st)[1] == 1
        # The loop stalled once, for the budget plus an epoch tick or two, not for the second.
        assert max(gaps) < 0.5, max(gaps)


async def test_state_never_runs_inline(tmp_path: Path, kit: BundleKit) -> None:
    # A thrown-away run must leave no trace (state writes would).
    extra: dict[str, Any] = {
        **UNBATCHED,
        "sections": {"state": {"max_bytes": 4096, "max_keys": 16}},
    }
    bundle = kit.build("probe", 1, **extra)
    async with _stack(tmp_path, kit, bundle, adapter_state=True) as st:
        await _warm(st, 3 * WARMUP)
        assert (await st.service.run_adapter(_req(b"M"))).body == b"v1:2,4,6,8"
        assert _figures(st)[0] == 0


async def test_a_batched_model_runs_inline_when_its_batcher_starts_at_once(
    tmp_path: Path, kit: BundleKit
) -> None:
    # Sequential requests never wait for a batch: the guest's model calls run on the loop
    # (a busy batcher sends the run to the pool instead: test_now_models.py).
    bundle = kit.build("probe", 1, batching={"max_batch_size": 8, "max_queue_delay_us": 500})
    async with _stack(tmp_path, kit, bundle) as st:
        await _warm(st)
        for _ in range(3):
            assert (await st.service.run_adapter(_req(b"M"))).body == b"v1:2,4,6,8"
        assert _figures(st) == (3, 0)


async def test_with_other_requests_in_flight_only_the_crowded_cap_applies(
    tmp_path: Path, kit: BundleKit
) -> None:
    # While another request is in the service, the cap is crowded_cap_s (here: nothing),
    # because the workers' parallel cores then beat the hop for a sizeable guest.
    state = {"state": {"max_bytes": 64, "max_keys": 1}}
    busy = kit.build("stuck", 1, model=False, sections=state)
    policy = InlinePolicy(1.0, crowded_cap_s=0.0, budget_s=SURE_BUDGET_S)
    async with open_stack(
        tmp_path, kit, start=(kit.build("probe", 1, **UNBATCHED), busy),
        adapter_state=True, inline_adapters=policy,
    ) as st:  # fmt: skip
        await _warm(st)
        assert (await st.service.run_adapter(_req(b"Palone"))).body == b"v1:alone"
        assert _figures(st) == (1, 0)
        # 'stuck' keeps state, so it runs on the pool: the loop stays free meanwhile.
        long = asyncio.create_task(st.service.run_adapter(AdapterRequest("stuck", b"W300")))
        await until_async(lambda: st.service.in_flight() >= 1, "'stuck' in the service")
        assert (await st.service.run_adapter(_req(b"Pcrowd"))).body == b"v1:crowd"
        assert not long.done()
        assert _figures(st) == (1, 0)  # the crowded one went to the pool
        assert (await long).body == b"v1:300"

"""`inline_run`'s strike rule, at the edges a real guest only reaches on a loaded machine."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, NoReturn

import pytest

from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.runtime.serving import guest_run
from wasmgate.runtime.serving.inline import INLINE_BUDGET_S, InlinePolicy
from wasmgate.sandbox.errors import GuestDeadlineExceeded

KEY = "adapter:probe"


def _bundle() -> Any:
    return SimpleNamespace(guest_limits=lambda budget: budget, calls_batched=False)


def _trap_at_once(*_: object, **__: object) -> NoReturn:
    raise GuestDeadlineExceeded("epoch deadline")


def _run(policy: InlinePolicy, deadline_s: float = 10.0) -> object:
    return _run_at(policy, time.monotonic() + deadline_s)


def _run_at(policy: InlinePolicy, deadline: float) -> object:
    req = AdapterRequest("probe", b"", deadline=deadline)
    return guest_run.inline_run(None, _bundle(), req, deadline, policy)  # type: ignore[arg-type]


async def test_an_epoch_deadline_that_fires_early_is_still_a_strike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A ticker that woke late catches up in one step and traps the guest before the budget
    # has passed on the clock: the run is thrown away, and the guest must not get the loop
    # again on the next request (it did: no strike, so the next one stalled the loop too).
    monkeypatch.setattr(guest_run, "run_guest", _trap_at_once)
    policy = InlinePolicy(1.0)
    assert _run(policy) is None
    assert policy.figures()[KEY] == (0, 1)
    assert policy.average_s(KEY) == pytest.approx(INLINE_BUDGET_S)


async def test_the_requests_own_deadline_is_not_a_strike(monkeypatch: pytest.MonkeyPatch) -> None:
    # Inside a deadline shorter than the budget, the trap is the request's: it is raised
    # to the caller (504), and the adapter keeps its inline standing.
    monkeypatch.setattr(guest_run, "run_guest", _trap_at_once)
    policy = InlinePolicy(1.0)
    with pytest.raises(GuestDeadlineExceeded):
        _run(policy, deadline_s=INLINE_BUDGET_S / 2)
    assert KEY not in policy.figures()


async def test_a_quick_answer_is_kept_and_a_slow_one_is_thrown_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fake clock: a real sleep(0) can take longer than the budget on a loaded machine.
    now = [1000.0]
    monkeypatch.setattr(guest_run, "time", SimpleNamespace(monotonic=lambda: now[0]))
    answers = iter([INLINE_BUDGET_S / 2, 2 * INLINE_BUDGET_S])

    def answer(*_: object, **__: object) -> str:
        now[0] += next(answers)
        return "answer"

    monkeypatch.setattr(guest_run, "run_guest", answer)
    policy = InlinePolicy(1.0)
    deadline = now[0] + 10.0
    assert _run_at(policy, deadline) == "answer"
    assert KEY not in policy.figures()
    assert _run_at(policy, deadline) is None  # finished, but past the budget: made again
    assert policy.figures()[KEY] == (0, 1)

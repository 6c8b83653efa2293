"""`FairPool`: the worker threads, shared between tenants by weighted fair queueing.

A tenant is one adapter or one directly served model (the admission gate's key). Each
tenant has its own FIFO queue; a free worker takes the next job of the tenant that has
received the least service per unit of weight so far (start-time fair queueing, with the
service measured as the worker time its jobs really took). So a tenant that keeps 64
requests queued gets its share of the workers, not all of them, and a quiet tenant's job
starts as soon as a worker frees up instead of behind the flood.

Fair ordering alone cannot help a tenant whose job arrives while every worker is busy (a
running job is never preempted), so two more rules bound what the busy tenants may hold:
- a tenant holds at most its share of the workers, ``workers * weight / total weight`` of
  the tenants seen in the last ``RECENT_S`` (at least one): a quiet tenant that sends a
  request now and then keeps its share free, however many jobs the others queue;
- and never more than ``max_tenant_workers`` (default: all but one), so even a lone busy
  tenant leaves a worker for the first request of any other.
A tenant that just became busy starts at the current virtual time, so idleness banks no
credit (it cannot then hold every worker to catch up).

A job whose future was cancelled while queued (its request's deadline passed) never runs.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

__all__ = ["FairPool", "TenantExecutor"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_TENANT = ""
# The first estimate of a tenant's job cost, charged when a job starts and corrected when it
# ends; later jobs are estimated by a moving average of what the tenant's jobs took.
_FIRST_ESTIMATE_S = 0.001
_EWMA = 0.2
RECENT_S = 1.0


@dataclass
class _Job:
    seq: int
    future: Future[Any]
    call: Callable[[], Any]


@dataclass
class _Tenant:
    weight: float
    vtime: float = 0.0
    running: int = 0
    estimate_s: float = _FIRST_ESTIMATE_S
    jobs: deque[_Job] = field(default_factory=deque)

    @property
    def idle(self) -> bool:
        return self.running == 0 and not self.jobs


class FairPool(Executor):
    """``workers`` threads; ``submit_as(tenant, weight, fn, ...)`` queues a job for a tenant.

    ``submit`` (the plain `Executor` API) runs under one default tenant of weight 1.
    """

    def __init__(
        self, workers: int, *, max_tenant_workers: int = 0, name: str = "wasmgate-worker"
    ) -> None:
        """Start ``workers`` threads; ``max_tenant_workers`` 0 means ``workers - 1`` (≥ 1)."""
        if workers < 1:
            raise ValueError("FairPool needs at least one worker")
        self.workers = workers
        self.max_tenant_workers = min(workers, max_tenant_workers or max(1, workers - 1))
        self._cv = threading.Condition()
        self._tenants: dict[str, _Tenant] = {}
        self._vclock = 0.0
        self._recent: dict[str, tuple[float, float]] = {}  # tenant -> (last submit, weight)
        self._seq = itertools.count()
        self._closed = False
        self._queued = 0  # jobs in every tenant's queue (changed under the lock)
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def for_tenant(self, tenant: str, weight: float) -> TenantExecutor:
        """An `Executor` whose jobs all belong to ``tenant`` (for ``run_in_executor``)."""
        return TenantExecutor(self, tenant, weight)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn`` under the default tenant."""
        return self.submit_as(DEFAULT_TENANT, 1.0, fn, *args, **kwargs)

    def submit_as(
        self, tenant: str, weight: float, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        """Queue ``fn(*args, **kwargs)`` as a job of ``tenant`` (weight > 0)."""
        if not weight > 0:
            raise ValueError(f"tenant weight must be positive, not {weight!r}")
        future: Future[T] = Future()
        # The job runs in the submitter's context (like asyncio.to_thread): a request's
        # trace context reaches the worker, so its spans get the right parent.
        ctx = contextvars.copy_context()
        with self._cv:
            if self._closed:
                raise RuntimeError("cannot submit to a closed FairPool")
            t = self._tenants.get(tenant)
            if t is None:  # idle tenants are forgotten, so idleness banks no credit
                t = self._tenants[tenant] = _Tenant(weight, vtime=self._vclock)
            t.weight = weight
            self._seen(tenant, weight)
            t.jobs.append(_Job(next(self._seq), future, lambda: ctx.run(fn, *args, **kwargs)))
            self._queued += 1
            self._cv.notify()
        return future

    def has_queued(self, besides: str | None = None) -> bool:
        """Whether any job waits for a worker (an inline run must not overtake it); with
        ``besides``, any job of another tenant than that one.

        Read without the lock (asked once per request on the event loop): a count changing
        at this very moment is a race the caller's decision tolerates either way. Why
        ``besides``: a tenant's own queued jobs must not keep its next requests off the
        loop, or one run on the pool under load (a strike's warm-up) queued the next ones
        behind it, and each found the queue busy again: the adapter stayed on the pool, at
        a GIL hand-off per host call, for as long as the load lasted."""
        queued = self._queued
        if besides is None or queued == 0:
            return queued > 0
        own = self._tenants.get(besides)
        return queued > (len(own.jobs) if own is not None else 0)

    def stats(self) -> dict[str, dict[str, float]]:
        """Per busy tenant: jobs running and queued, weight."""
        with self._cv:
            return {
                name: {"running": t.running, "queued": len(t.jobs), "weight": t.weight}
                for name, t in self._tenants.items()
            }

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking jobs; queued jobs still run unless ``cancel_futures``."""
        with self._cv:
            self._closed = True
            if cancel_futures:
                for t in self._tenants.values():
                    while t.jobs:
                        t.jobs.popleft().future.cancel()
                        self._queued -= 1
            self._cv.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()

    # -- workers ----------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cv:
                picked = self._next()
                while picked is None:
                    if self._closed and not any(t.jobs for t in self._tenants.values()):
                        return
                    self._cv.wait()
                    picked = self._next()
            name, tenant, job, charged = picked
            start = time.perf_counter()
            try:
                job.future.set_result(job.call())
            except BaseException as e:  # the job's failure belongs to its caller
                job.future.set_exception(e)
            finally:
                self._done(name, tenant, charged, time.perf_counter() - start)
            del job, picked

    def _next(self) -> tuple[str, _Tenant, _Job, float] | None:
        """Under the lock: the next runnable job, its tenant charged the estimated cost."""
        while True:
            total = sum(w for _, w in self._recent.values())
            eligible = [
                (t.vtime, t.jobs[0].seq, name)
                for name, t in self._tenants.items()
                if t.jobs and t.running < self._share(t.weight, total)
            ]
            if not eligible:
                return None
            _, _, name = min(eligible)
            tenant = self._tenants[name]
            job = tenant.jobs.popleft()
            self._queued -= 1
            if not job.future.set_running_or_notify_cancel():
                self._forget_if_idle(name, tenant)
                continue  # its request gave up while queued: never run it
            self._vclock = max(self._vclock, tenant.vtime)
            charged = tenant.estimate_s / tenant.weight
            tenant.vtime += charged
            tenant.running += 1
            return name, tenant, job, charged

    def _share(self, weight: float, total: float) -> int:
        """Workers a tenant of ``weight`` may hold while ``total`` weight was seen lately."""
        share = int(self.workers * weight / total) if total > 0 else self.workers
        return min(self.max_tenant_workers, max(1, share))

    def _seen(self, tenant: str, weight: float) -> None:
        now = time.monotonic()
        self._recent[tenant] = (now, weight)
        for name in [n for n, (at, _) in self._recent.items() if now - at > RECENT_S]:
            del self._recent[name]

    def _done(self, name: str, tenant: _Tenant, charged: float, took_s: float) -> None:
        with self._cv:
            tenant.running -= 1
            tenant.vtime += took_s / tenant.weight - charged
            tenant.estimate_s += _EWMA * (took_s - tenant.estimate_s)
            self._forget_if_idle(name, tenant)
            self._cv.notify()

    def _forget_if_idle(self, name: str, tenant: _Tenant) -> None:
        # Tenants come and go with bundles: an idle one keeps no state (it would start at
        # the virtual clock again anyway).
        if tenant.idle and self._tenants.get(name) is tenant:
            del self._tenants[name]


class TenantExecutor(Executor):
    """`FairPool` jobs of one tenant, as a plain `Executor`."""

    def __init__(self, pool: FairPool, tenant: str, weight: float) -> None:
        """Bind ``tenant`` and its ``weight``; nothing is started here."""
        self._pool, self.tenant, self.weight = pool, tenant, weight

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn`` as one of this tenant's jobs."""
        return self._pool.submit_as(self.tenant, self.weight, fn, *args, **kwargs)

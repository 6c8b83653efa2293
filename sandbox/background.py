"""The engine's one background thread: sandbox work taken off the request path.

Invariants:
- One thread per ``SandboxEngine`` (started on the first job, not before: an engine that never
  serves a fresh-mode request has no extra thread); jobs run one at a time, in order.
- A job never raises out of the loop: an exception is swallowed after the job's own cleanup
  (jobs here only build spare instances and close used stores, both self-contained).
- ``close()`` stops and joins the thread; jobs still queued are dropped without running, so
  what they captured (a store to close, a spare to build) is released by reference counting.
  ``submit`` after ``close`` returns False and the caller does the work itself or skips it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

__all__ = ["Background"]

Job = Callable[[], None]


class Background:
    """A single daemon thread that runs submitted jobs in order (see the module invariants)."""

    def __init__(self, name: str) -> None:
        """No thread yet; it starts with the first ``submit``."""
        self._name = name
        self._jobs: deque[Job] = deque()
        self._cv = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> bool:
        """Queue ``job``; False (not queued) once closed."""
        with self._cv:
            if self._closed:
                return False
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()
        return True

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until no job is queued or running; False if that took over ``timeout_s``."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._jobs and not self._busy, timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._busy = False
                self._cv.notify_all()  # settle() waiters
                self._cv.wait_for(lambda: self._jobs or self._closed)
                if self._closed:
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                job()
            except Exception:  # noqa: S110 - see the module invariants: jobs clean up themselves
                pass

    def close(self) -> None:
        """Stop the thread (idempotent); queued jobs are dropped."""
        with self._cv:
            self._closed = True
            self._jobs.clear()
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

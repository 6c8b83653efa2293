"""The gateway's counters across worker processes that come and go.

`merge_expositions` adds up what the processes running now have counted. A worker replaced
by a roll (every install, removal, promotion or trust change replaces them all) or by a
crash took its counts with it, so the gateway's counters went back, which Prometheus reads
as a reset (``rate()`` and ``increase()`` over it are wrong). Here they are kept:

- a worker that stops hands its final exposition to the supervisor, after its last answer
  (``POST`` `wasmgate.runtime.http.forward.RETIRED_PATH` on the control socket), and its
  counts are folded into the gateway's retired total when its process has ended;
- a worker that dies without a word (SIGKILL, a crash) leaves the counts of the last
  scrape of it, and ``floor`` keeps every summed series from going below what was last
  exposed, so the counts served between that scrape and the death stall the series until
  the gateway has counted as many again, instead of taking it back.

Only what is summed over processes (counters, histograms, summaries) is kept; a gauge is
what the running processes say.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from wasmgate.runtime.supervisor.metrics_merge import SUMMED_TYPES, merge_expositions

__all__ = ["GatewayCounts"]


class GatewayCounts:
    """The counts of the gateway's ended workers, and the floor of what it exposed."""

    def __init__(self) -> None:
        self._last: dict[int, str] = {}
        """A running worker's last exposition (its final one once it handed it over)."""
        self._final: set[int] = set()
        self._retired = ""
        self._floor: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def seen(self, pid: int, text: str) -> None:
        """A scrape of a running worker (ignored once its final counts arrived)."""
        if text and pid not in self._final:
            self._last[pid] = text

    def final(self, pid: int, text: str) -> None:
        """A stopping worker's last counts: nothing more is counted by it."""
        self._last[pid] = text
        self._final.add(pid)

    def ended(self, pid: int) -> None:
        """``pid`` exited: what it counted becomes part of the retired total."""
        self._final.discard(pid)
        text = self._last.pop(pid, "")
        if text:
            self._retired = merge_expositions(self._retired, [_counts_only(text)]).decode()

    def merge(self, own: str, live: Iterable[tuple[int, str]]) -> bytes:
        """The gateway's exposition: the supervisor's (``own``), the running workers'
        (``(pid, text)``) and the retired total, no summed series below its last value."""
        texts, running = [], set()
        for pid, text in live:
            self.seen(pid, text)
            texts.append(text)
            running.add(pid)
        # A replaced worker finishing its last requests is no longer scraped: its counts
        # so far stand in until it has ended and handed over the rest.
        leaving = [_counts_only(t) for pid, t in self._last.items() if pid not in running]
        return merge_expositions(own, [*texts, *leaving, self._retired], floor=self._floor)


def _counts_only(text: str) -> str:
    """The families of ``text`` that are summed over processes, as exposition text."""
    kept = [f for f in text_string_to_metric_families(text) if f.type in SUMMED_TYPES]
    return merge_expositions("", [], families=kept).decode()

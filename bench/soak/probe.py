"""The daemon's resources read from /proc (RSS, open fds, threads) and the store's SQLite
files, sampled on a timer; slopes by least squares."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the soak began
    phase: str
    rss_mib: float
    fds: int
    threads: int
    store_mib: float


def read(pids: Sequence[int], store_db: Path, t: float, phase: str) -> Sample:
    """RSS, fds and threads summed over the gateway's processes (a worker that ended
    meanwhile counts as nothing)."""
    rss = fds = threads = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            fds += sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        fields = {ln.split(":", 1)[0]: ln.split(":", 1)[1].split() for ln in status if ":" in ln}
        rss += int(fields["VmRSS"][0])
        threads += int(fields["Threads"][0])
    files = [store_db, store_db.with_name(store_db.name + "-wal")]
    store = sum(f.stat().st_size for f in files if f.exists())
    return Sample(t, phase, rss / 1024, fds, threads, store / (1 << 20))


def fd_kinds(pids: Sequence[int]) -> dict[str, int]:
    """Open fds by what they are, over the gateway's processes: ``socket``, ``pipe``,
    ``anon_inode``, ``memfd`` (wasmtime's memory images, one per compiled module alive),
    else the file's path."""
    kinds: Counter[str] = Counter()
    for pid in pids:
        with contextlib.suppress(OSError):  # a worker that ended meanwhile
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = str(fd.readlink())
                except OSError:
                    continue  # closed meanwhile
                if target.startswith("/memfd:"):
                    target = "memfd"
                kinds[target.split(":[", 1)[0]] += 1
    return dict(kinds)


def slope_per_10min(samples: list[Sample], what: str) -> float:
    """Least-squares slope of ``what`` over ``samples``, per 10 minutes (0 for < 3)."""
    if len(samples) < 3:
        return 0.0
    xs = [s.t for s in samples]
    ys = [float(getattr(s, what)) for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return cov / var * 600 if var else 0.0


@dataclass
class Prober:
    """Samples every ``every_s`` until stopped; ``phase`` is read at each sample.
    ``threads``: the daemon's threads by name, read at the rest points."""

    pids: Callable[[], list[int]]
    store_db: Path
    every_s: float
    threads: Callable[[], Counter[str]]
    began: float = field(default_factory=time.perf_counter)
    phase: str = "warm-up"
    samples: list[Sample] = field(default_factory=list)
    fds_at: dict[str, dict[str, int]] = field(default_factory=dict)
    threads_at: dict[str, dict[str, int]] = field(default_factory=dict)

    def sample(self) -> Sample:
        s = read(self.pids(), self.store_db, time.perf_counter() - self.began, self.phase)
        self.samples.append(s)
        return s

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every_s)

    def at_rest(self, label: str) -> None:
        """A labelled sample plus the fds by kind (see `fd_kinds`) and the threads by name."""
        phase, self.phase = self.phase, label
        self.sample()
        self.phase = phase
        self.fds_at[label] = fd_kinds(self.pids())
        self.threads_at[label] = dict(self.threads())

    def of(self, *phases: str) -> list[Sample]:
        return [s for s in self.samples if s.phase in phases]

"""``python -m bench fleet-sim --gateways N [--per-worker K] [--offline-timeout S] [--json OUT]``

Starts mosquitto, docker-registry and ``ceil(N / K)`` worker processes of K simulated
gateways each (`bench.fleetsim.worker`), seeds probe v1, then runs the scenarios of
`bench.fleetsim.scenarios` in order and prints one line per figure (value, and the goal
of issue 53 where it has one). Exit code 1 when a scenario's final state is wrong (a
gateway not on the version it should run): figures of a wrong run mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.fleetsim import scenarios as sc
from bench.fleetsim.fleet import sim_fleet


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench fleet-sim", description=__doc__)
    p.add_argument("--gateways", type=int, required=True, help="simulated gateways (N)")
    p.add_argument("--per-worker", type=int, default=2500, help="gateways per process (K)")
    p.add_argument("--offline-timeout", type=float, default=None, metavar="SECONDS",
                   help="--wave-timeout of the offline scenario (default: 12 ms per "
                   "gateway, at least 30 s: 120 s at 10,000, for the last wave's "
                   "gateways to work through documents sent at once)")  # fmt: skip
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--root", type=Path, help="work directory (default: a temporary one, "
                   "in /dev/shm when it exists: 10,000 state files)")  # fmt: skip
    return p.parse_args(argv)


def offline_timeout(n: int) -> float:
    """The offline scenario's wave timeout for N gateways: 12 ms each, at least 30 s.

    A wave's documents go out at once and its gateways then work through them (pull,
    verify, report) on this machine's two CPUs, shared with the broker, the registry and
    the CLI: about 200 gateways a second, so the last wave's 90 % of N take ~4.5 ms each.
    The timeout leaves them more than twice that (other work shares the machine); a fixed
    one either aborts a large fleet's offline rollout or idles a small one's.
    """
    return max(30.0, 0.012 * n)


def run(n: int, per_worker: int, root: Path, timeout: float) -> sc.Outcome:
    o = sc.Outcome()
    start = time.perf_counter()
    with sim_fleet(root, n, per_worker) as f:
        o.add("setup", "all connected after", time.perf_counter() - start, "s", 0)
        f.wait_reports(lambda r: len(r) >= n, 300)
        refs = [f.push(v) for v in (1, 2, 3)]
        seed = f.rollout(refs[0], "--waves", "100%", "--wave-timeout", "600")
        o.add("setup", "seed v1 (one wave)", seed.wall_s, "s", 0)
        o.expect(seed.code == 0, f"seed: exit {seed.code}: {seed.err[-500:]}")
        # the seed ends with the group document: every gateway applies it too (one serial)
        f.wait_reports(lambda r: len({x.serial for x in r.values()}) == 1, 300)
        sc.rollout(f, o, refs[1], 2)
        sc.abort(f, o, refs[2], 2)
        sc.status(f, o)
        sc.restart(f, o)
        sc.offline(f, o, refs[2], 3, timeout)
        usage = f.all("stats")
        o.add("setup", "worker peak RSS (max)", max(u["rss_mb"] for u in usage), "MiB", 0)
        o.add("setup", "worker CPU (sum)", sum(u["cpu_s"] for u in usage), "s", 0)
    return o


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(
        prefix="wasmgate-fleetsim-", dir=args.root or (shm if shm.is_dir() else None)
    ) as tmp:
        timeout = args.offline_timeout
        if timeout is None:
            timeout = offline_timeout(args.gateways)
        outcome = run(args.gateways, args.per_worker, Path(tmp), timeout)
    for fig in outcome.figures:
        goal = "" if not fig.baseline else f"   (goal {fig.baseline:g})"
        print(f"{fig.scenario:<22} {fig.name:<40} {fig.value:>12.4g} {fig.unit}{goal}")
    for problem in outcome.problems:
        print(f"WRONG: {problem}", file=sys.stderr)
    if args.json is not None:
        doc = {
            "gateways": args.gateways,
            "per_worker": args.per_worker,
            "figures": [asdict(f) for f in outcome.figures],
            "problems": outcome.problems,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")  # fmt: skip
    return 1 if outcome.problems else 0

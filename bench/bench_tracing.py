"""What tracing costs on the request path, measured in one run on real daemons.

``python -m bench.bench_tracing [--quick] [--json OUT]``

Daemons serving the digits MLP behind the pass-through adapter, driven by ``wrk`` with one
connection (batch 1, closed loop), both paths: raw adapter (sandbox + wasi-nn) and V2
binary (model only). Rounds alternate between the daemons so load drift hits all alike;
each figure is the median of the rounds' p50s.

- **before**: the same daemon from the source tree of the commit before tracing existed
  (``git archive`` of the parent of the commit that added ``runtime/ops/tracing.py``, or of
  ``WASMGATE_BENCH_BEFORE_REV``), laid out as the package and put first on ``PYTHONPATH``.
  Left out (with its figures) with ``--quick`` and where git cannot produce that tree.
- **off**: this tree, ``telemetry.otlp_endpoint`` unset (the default). Compared with before:
  the cost of tracing for everyone who does not use it.
- **off + traceparent**: the same daemon, each request bringing a ``traceparent`` (passed on
  to the answer, no span made).
- **on**: ``telemetry.otlp_endpoint`` set, every request traced and exported to a local
  collector-free receiver (`tests.fixtures.otlp`).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from bench import bench_http, wrk
from bench.common import Figure, median, script_main
from bench.trees import package_tree, rev_before
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.net import serving
from tests.fixtures.otlp import OtlpReceiver

EXPORT_DRAIN_S = 3.0
"""More than the default ``telemetry.export_delay_ms`` (1 s) plus an export."""
TRACEPARENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def before_rev() -> str | None:
    """The commit before tracing (or ``WASMGATE_BENCH_BEFORE_REV``); None without git."""
    return rev_before("runtime/ops/tracing.py")


def before_site(root: Path) -> Path | None:
    """The package tree of `before_rev`, or None (no git, a shallow clone): then the
    ``before`` figures are left out, saying why."""
    rev = before_rev()
    if rev is None:
        print("bench_tracing: no commit before tracing found; no 'before' figures")
        return None
    try:
        return package_tree(rev, root / "before")
    except (OSError, subprocess.SubprocessError) as e:
        print(f"bench_tracing: cannot unpack {rev} ({e}); no 'before' figures")
        return None


@contextmanager
def daemons(root: Path, digits: Path, before: bool) -> Iterator[dict[str, Daemon]]:
    """The daemons by configuration name, all serving the same signed bundle."""
    kit = BenchKit(root / "kit")
    kit.build("digits", digits)
    receiver = OtlpReceiver()
    site = before_site(root) if before else None
    with ExitStack() as stack:
        otlp = stack.enter_context(serving(receiver.app()))
        configs: dict[str, tuple[dict[str, object], dict[str, str]]] = {
            "off": ({}, {}),
            "on": ({"telemetry": {"otlp_endpoint": otlp}}, {}),
        }
        if site is not None:
            configs["before"] = ({}, {"PYTHONPATH": str(site)})
        started: dict[str, Daemon] = {}
        for name, (config, env) in configs.items():
            daemon = kit.daemon(root / name, config=config, env=env)
            stack.callback(daemon.stop)  # also when it never became ready
            try:
                daemon.start(timeout=120)
            except RuntimeError as e:
                if name != "before":
                    raise
                # An older tree may need packages this environment no longer installs.
                last = str(e).strip().splitlines()[-1]
                print(f"bench_tracing: the 'before' daemon did not start ({last}); no figures")
                continue
            if name == "before" and not _serves_digits(daemon):
                # Bundles are built by this tree: an older daemon may refuse a newer format.
                print("bench_tracing: the 'before' daemon refuses this tree's bundle; no figures")
                continue
            started[name] = daemon
        yield started


def _serves_digits(daemon: Daemon) -> bool:
    try:
        with urllib.request.urlopen(f"{daemon.url}/v2/models/digits/ready", timeout=30) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _p50s(
    stack: dict[str, Daemon],
    rounds: int,
    seconds: float,
    body: bytes,
    v2: tuple[bytes, dict[str, str]],
) -> dict[tuple[str, str], list[float]]:
    # "on" goes last, then its queued spans are given time to drain: their export (and the
    # receiver decoding them in this process) must not land on another case's window.
    cases: list[tuple[str, str, dict[str, str]]] = [
        (name, name, {}) for name in stack if name != "on"
    ]
    cases += [("off + traceparent", "off", TRACEPARENT), ("on", "on", {})]
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for label, name, extra in cases:
            url = stack[name].url
            adapter = wrk.run(f"{url}/v1/adapters/digits", body, extra, 1, seconds)
            model = wrk.run(f"{url}/v2/models/digits/infer", v2[0], {**v2[1], **extra}, 1, seconds)
            samples.setdefault((label, "adapter"), []).append(adapter.p50)
            samples.setdefault((label, "V2"), []).append(model.p50)
        time.sleep(EXPORT_DRAIN_S)
    return samples


def run(quick: bool) -> list[Figure]:
    """Every configuration on both paths; ``quick``: one short round, no ``before``
    daemon (checks that it runs)."""
    rounds, seconds = (1, 1.0) if quick else (5, 3.0)
    x = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
    with (
        tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp,
        daemons(Path(tmp), get_models().digits_fp32, before=not quick) as stack,
    ):
        samples = _p50s(stack, rounds, seconds, payload(x), bench_http.v2_body(x, "input"))
    p50 = {key: median(values) * 1e6 for key, values in samples.items()}
    figures = []
    for path in ("adapter", "V2"):
        pairs = [("off", "before"), ("off + traceparent", "off"), ("on", "off")]
        for label, base in pairs:
            if (base, path) in p50:
                figures.append(Figure(
                    "tracing", f"{path} p50, tracing {label}", p50[(label, path)], "us",
                    f"{path} p50, {base}", p50[(base, path)],
                ))  # fmt: skip
    return figures


def main() -> None:
    script_main(__doc__, run, "one short round")


if __name__ == "__main__":
    main()

"""Bundle verification speed against plain ``hashlib.sha256`` over the same bytes.

``python -m bench.bench_verify [--mb 50] [--repeat 7] [--json OUT]``

Builds one signed bundle of about ``--mb`` MB (an adapter and a random "model") and
measures, in the same run, the median of:

- baseline: ``hashlib.sha256`` over the bundle's bytes, already in memory;
- ``verify``: ``verify_bundle(path)`` - map the file read-only, check the signature, hash
  every member straight from the mapping (what ``wasmgate bundle verify`` does);
- ``install``: ``BundleStore.install(path)`` into a fresh store - the same, plus copying
  each member into the blob store while it is hashed, ``fsync`` and the atomic commit.

Each figure is given as wall-clock time and as process CPU time (all threads).

The speed ratio printed is hashlib time / measured time (1.0 = as fast as hashing alone;
the goal for ``verify`` is >= 0.9). The file is in the page cache after the first warm-up.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Figure, format_table, write_json
from wasmgate.signing import BundleStore, TrustStore, build_bundle, generate_key, verify_bundle

MAX_BUNDLE = 1024**3


def _make_bundle(root: Path, mb: int) -> tuple[Path, TrustStore]:
    src = root / "src"
    src.mkdir()
    (src / "adapter.wasm").write_bytes(b"\0asm\x01\0\0\0" + os.urandom(64 * 1024))
    (src / "model.onnx").write_bytes(os.urandom(mb * 1024 * 1024 - 64 * 1024))
    (src / "bundle.toml").write_text(
        'name = "bench"\nversion = 1\n[adapter]\nfile = "adapter.wasm"\n'
        '[[models]]\nname = "bench-m"\nformat = "onnx"\nvariants = { fp32 = "model.onnx" }\n'
    )
    key = generate_key()
    out = root / "bench-1.wgb"
    build_bundle(src, key, out)
    return out, TrustStore.empty().with_signer(key.verify_key, ["bench", "bench-*"], {})


def _interleaved(
    cases: dict[str, tuple[Callable[[], None], Callable[[], object]]], repeat: int
) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds per case; rounds alternate the cases so load hits all alike.

    CPU time is the process's (all threads); on a loaded machine it is the steadier figure.
    """
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(repeat + 2):
        for name, (before, fn) in cases.items():
            before()
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            if i >= 2:  # two warm-up rounds
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n])) for n in cases}


def run(quick: bool) -> list[Figure]:
    """The suite's entry: a 20 MB bundle, 5 rounds (``quick``: 2 MB, 1 round)."""
    return measure(2, 1) if quick else measure(20, 5)


def measure(mb: int, repeat: int) -> list[Figure]:
    """Measure and return the figures (value and baseline in milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp:
        root = Path(tmp)
        bundle, trust = _make_bundle(root, mb)
        data = bundle.read_bytes()
        store_dir = root / "state"

        def fresh_store() -> None:
            shutil.rmtree(store_dir, ignore_errors=True)

        def nothing() -> None:
            pass

        def verify() -> None:
            verify_bundle(bundle, trust, max_bundle_bytes=MAX_BUNDLE)

        def install() -> None:
            BundleStore(store_dir, trust, max_bundle_bytes=MAX_BUNDLE).install(bundle)

        t = _interleaved(
            {
                "sha256": (nothing, lambda: hashlib.sha256(data).digest()),
                "verify": (nothing, verify),
                "install": (fresh_store, install),
            },
            repeat,
        )
    size = f"{len(data) / 1e6:.0f} MB"
    figures = []
    for kind, label in (("wall", "wall"), ("cpu", "CPU")):
        k = 0 if kind == "wall" else 1
        base = t["sha256"][k] * 1e3
        for name, what in (("verify", "read + hash"), ("install", "hash + copy + fsync")):
            value = t[name][k] * 1e3
            figures.append(Figure(size, f"{name} ({what}), {label}", value, "ms", "sha256", base))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mb", type=int, default=50, help="Bundle size in MB.")
    parser.add_argument("--repeat", type=int, default=7, help="Timed runs per figure.")
    parser.add_argument("--json", type=Path, help="Also write the figures as JSON here.")
    args = parser.parse_args()
    figures = measure(args.mb, args.repeat)
    print(format_table(figures))
    print()
    for f in figures:
        speed = f.baseline / f.value
        print(f"{f.name}: median {f.value:.1f} ms vs sha256 {f.baseline:.1f} ms "
              f"= {speed:.2f} x hashlib speed (goal >= 0.9)")  # fmt: skip
    if args.json:
        write_json(figures, args.json, {"mb": args.mb, "repeat": args.repeat})


if __name__ == "__main__":
    main()

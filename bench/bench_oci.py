"""Bundles through an OCI registry: push and pull of the demo bundle vs the bare blob API.

``python -m bench.bench_oci [--repeat 20] [--json OUT]``

Starts Debian's ``docker-registry`` (CNCF distribution) on loopback with its own storage,
signs the ``digits`` demo bundle (about 80 KB) and measures, in the same run, medians of:

- push: ``OciClient.push`` (what ``wasmgate bundle push`` does: existence checks, layer and
  config uploads, the manifest) to a fresh repository each round; baseline: one bare
  monolithic blob upload (``POST`` + ``PUT``) of the same bytes with ``urllib``;
- pull, cold: ``BundlePuller.pull`` by digest into an empty cache (manifest by digest, size
  check, streamed layer, both digests verified, fsync and rename); baseline: one bare
  ``GET`` of the layer blob with ``urllib`` (nothing checked, nothing kept);
- pull, held: the same ref again (the cache answers: no request; both files re-hashed);
- bytes downloaded per cold pull and per held pull, against the bundle's size (1.0 = one
  download of exactly the layer; 0 = nothing downloaded).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.common import Figure, format_table, median, write_json
from tests.fixtures.registry import Registry
from wasmgate.runtime.bundles.demo import prepare_demo
from wasmgate.runtime.fleet.pull import BundlePuller
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import Reference
from wasmgate.runtime.ops.config import RegistrySettings

SCENARIO = "oci"
LOOPBACK = RegistrySettings(insecure=True)


def run(quick: bool) -> list[Figure]:
    """The suite's entry: 20 rounds (``quick``: 2)."""
    return measure(2 if quick else 20)


def _bare_upload(reg: Registry, repo: str, data: bytes) -> None:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"http://{reg.address}/v2/{repo}/blobs/uploads/", b"")
    with urllib.request.urlopen(start, timeout=30) as r:
        location = r.headers["Location"]
    sep = "&" if "?" in location else "?"
    headers = {"Content-Type": "application/octet-stream"}
    put = urllib.request.Request(f"{location}{sep}digest={digest}", data, headers, method="PUT")
    with urllib.request.urlopen(put, timeout=30):
        pass


def _bare_get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=30) as r:
        r.read()


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def _pulls(puller: BundlePuller, ref: str) -> tuple[float, float, int, int]:
    """(cold s, held s, bytes of the cold pull, bytes of the held pull) for one round."""
    puller.prune([])  # an empty cache: the cold pull downloads
    before = puller.stats.bytes_downloaded
    start = time.perf_counter()
    await puller.pull(ref)
    cold = time.perf_counter() - start
    cold_bytes = puller.stats.bytes_downloaded - before
    start = time.perf_counter()
    await puller.pull(ref)
    held = time.perf_counter() - start
    return cold, held, cold_bytes, puller.stats.bytes_downloaded - before - cold_bytes


def measure(rounds: int) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="wasmgate-bench-oci-") as tmp:
        root = Path(tmp)
        bundle = prepare_demo(root / "data", names=("digits",)).bundle_dir / "digits.wgb"
        data = bundle.read_bytes()
        reg = Registry(root / "registry")
        reg.start()
        try:
            return _measure(reg, root, bundle, data, rounds)
        finally:
            reg.stop()


def _measure(reg: Registry, root: Path, bundle: Path, data: bytes, rounds: int) -> list[Figure]:
    client = OciClient(reg.address, LOOPBACK)
    push: list[float] = []
    bare_push: list[float] = []
    ref = ""
    try:
        for i in range(rounds + 1):  # round 0 warms up
            target = Reference.parse(f"{reg.address}/bench/digits-{i}:v1")
            t = _timed(functools.partial(client.push, bundle, target, {}))
            b = _timed(functools.partial(_bare_upload, reg, f"bench/bare-{i}", data))
            if i:
                push.append(t)
                bare_push.append(b)
            ref = str(target.pinned(client.resolve(target, len(data)).digest))
    finally:
        client.close()
    layer = "sha256:" + hashlib.sha256(data).hexdigest()
    blob_url = f"http://{reg.address}/v2/bench/digits-0/blobs/{layer}"
    puller = BundlePuller(LOOPBACK, root / "cache" / "pulled")

    async def rounds_of_pulls() -> list[tuple[float, float, int, int]]:
        return [await _pulls(puller, ref) for _ in range(rounds + 1)][1:]

    pulls = asyncio.run(rounds_of_pulls())
    bare_get = [_timed(lambda: _bare_get(blob_url)) for _ in range(rounds)]
    size, ms = len(data), 1e3
    what = f"demo bundle {size / 1e3:.0f} KB"
    return [
        Figure(SCENARIO, f"push, {what}", median(push) * ms, "ms", "bare blob upload",
               median(bare_push) * ms),
        Figure(SCENARIO, f"pull by digest, cold cache, {what}", median([p[0] for p in pulls]) * ms,
               "ms", "bare blob GET", median(bare_get) * ms),
        Figure(SCENARIO, f"pull by digest, held, {what}", median([p[1] for p in pulls]) * ms,
               "ms", "bare blob GET", median(bare_get) * ms),
        Figure(SCENARIO, "bytes downloaded, cold pull", float(median([p[2] for p in pulls])),
               "B", "bundle size", float(size)),
        Figure(SCENARIO, "bytes downloaded, held pull", float(median([p[3] for p in pulls])),
               "B", "bundle size", float(size)),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=20, help="Rounds per figure.")
    parser.add_argument("--json", type=Path, help="Also write the figures as JSON here.")
    args = parser.parse_args()
    figures = measure(args.repeat)
    print(format_table(figures))
    if args.json:
        write_json(figures, args.json, {"repeat": args.repeat})


if __name__ == "__main__":
    main()

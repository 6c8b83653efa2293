"""Same-run A/B of `bench.bench_cores`'s cells: this checkout against an earlier commit.

``python -m bench.cores_ab REV [--now REV2] [--rounds N] [--seconds S] [--only http|mqtt]``

``git archive REV`` is unpacked into a temporary directory and laid out as the package
(``wasmgate/`` → the folders, as an editable install does); a second demo daemon runs it
(``PYTHONPATH``) beside this checkout's, both on one mosquitto under two gateway ids. Every
cell is measured on both daemons back to back, their order alternating between rounds, so
both see the same machine load; the table gives each cell's medians and the ratio
now / before (req/s: higher is better; CPU and switches per request: lower).
"""

from __future__ import annotations

import argparse
import functools
import io
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import wasmgate
from bench import bench_cores as bc
from bench import cores_report as cr
from bench.bench_mqtt import start_echo
from bench.cores_report import Cell
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from wasmgate.runtime.mqtt._paho_private import close_threaded

Label = str


def package_of(rev: str, root: Path) -> Path:
    """``rev``'s source unpacked under ``root/src`` and importable from ``root/pkg``."""
    tar = subprocess.run(["git", "archive", rev], cwd=bc.REPO, capture_output=True, check=True)
    src = root / "src"
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(src, filter="data")
    pkg = root / "pkg" / "wasmgate"
    pkg.mkdir(parents=True)
    editable = Path(wasmgate.__file__).parent  # the editable install's tree of links
    for entry in editable.iterdir():
        target = entry.readlink().relative_to(bc.REPO)
        (pkg / entry.name).symlink_to(src / target)
    return root / "pkg"


def cells_of(
    daemon: Daemon, gateway: str, port: int, seconds: float, tmp: Path
) -> dict[tuple[str, str, int], Callable[[], Cell]]:
    """Every cell of one daemon, as a function measuring it once."""
    pid = daemon.proc.pid if daemon.proc is not None else 0
    adapter_body, model_body = tmp / "adapter.json", tmp / "model.json"
    adapter_body.write_bytes(bc.SAMPLE.read_bytes())
    model_body.write_bytes(bc.v2_json())
    out: dict[tuple[str, str, int], Callable[[], Cell]] = {}

    def http(path: str, cpus: str, conns: int) -> Cell:
        bc.pin(pid, cpus)
        try:
            return bc.http_cell(daemon, pid, path, conns, seconds)
        finally:
            bc.pin(pid, cr.BOTH_CPUS)

    for conns in cr.CONNECTIONS:
        for path in ("adapter", "model"):
            for cpus in (cr.ONE_CPU, cr.BOTH_CPUS):
                out[path, cpus, conns] = functools.partial(http, path, cpus, conns)
    base = f"wasmgate/v1/{gateway}"
    topics = {
        "adapter": (f"{base}/adapters/{bc.ADAPTER}/req", adapter_body),
        "model": (f"{base}/models/{bc.MODEL}/infer", model_body),
    }
    for clients in cr.CLIENTS:
        for path, (topic, body) in topics.items():
            load = functools.partial(bc.fan_in, port, topic, clients, seconds, body)
            out[path, "mqtt", clients] = functools.partial(bc.measured, pid, load)
    return out


def _transport(key: tuple[str, str, int]) -> str:
    return "mqtt" if key[1] == "mqtt" else "http"


def table(now: dict[tuple[str, str, int], Cell], before: dict[tuple[str, str, int], Cell]) -> str:
    head = (
        "| cell | req/s now / before | p50 ms now / before | p99 ms now / before "
        "| CPU µs/req now / before | switches/req now / before |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- |"]
    for key in sorted(now):
        a, b = now[key], before[key]
        path, where, n = key
        label = f"{path} {'MQTT' if where == 'mqtt' else 'CPU ' + where} x{n}"
        lines.append(
            f"| {label} | {a.rps:,.0f} / {b.rps:,.0f} ({a.rps / b.rps:.2f}x) "
            f"| {a.p50 * 1e3:.2f} / {b.p50 * 1e3:.2f} | {a.p99 * 1e3:.1f} / {b.p99 * 1e3:.1f} "
            f"| {a.cpu_us:.0f} / {b.cpu_us:.0f} | {a.switches:.1f} / {b.switches:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rev", help="the earlier commit (git rev)")
    parser.add_argument("--now", help="a later commit in place of this checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", choices=("http", "mqtt"), help="only these cells")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wasmgate-ab-") as tmp_name:
        tmp = Path(tmp_name)
        pythonpath = package_of(args.rev, tmp / "before")
        broker = Broker(tmp / "mosquitto")
        broker.start()
        daemons: list[Daemon] = []
        try:
            env = None if args.now is None else {"PYTHONPATH": str(package_of(args.now, tmp / "n"))}
            now = bc.start_demo(tmp / "now", broker.port, "now", env)
            daemons.append(now)
            old = bc.start_demo(tmp / "old", broker.port, "old", {"PYTHONPATH": str(pythonpath)})
            daemons.append(old)
            echo = start_echo(broker.port, qos=0)
            runs = {
                "now": cells_of(now, "now", broker.port, args.seconds, tmp / "now"),
                "old": cells_of(old, "old", broker.port, args.seconds, tmp / "old"),
            }
            keys = [k for k in runs["now"] if args.only in (None, _transport(k))]
            got: dict[Label, dict[tuple[str, str, int], list[Cell]]] = {"now": {}, "old": {}}
            for r in range(args.rounds):
                for key in keys:
                    for label in ("now", "old") if r % 2 == 0 else ("old", "now"):
                        got[label].setdefault(key, []).append(runs[label][key]())
            close_threaded(echo)
        finally:
            for d in daemons:
                d.stop()
            broker.stop()
    med = {label: {k: bc.med(v) for k, v in cells.items()} for label, cells in got.items()}
    now_name = args.now or "this checkout"
    print(f"now: {now_name}; before: {args.rev}; medians of {args.rounds} rounds")
    print(table(med["now"], med["old"]))


if __name__ == "__main__":
    main()

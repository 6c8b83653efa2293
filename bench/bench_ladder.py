"""The request-path ladder on a real daemon: raw ORT -> sandbox -> HTTP V2 -> MQTT.

``python -m bench.bench_ladder [--quick] [--json OUT]``

For the digits MLP and the MobileNet-class CNN, batch 1, closed loop, one client unless
noted; every figure's baseline is ``infer`` on the same ONNX file through the daemon's own
ONNX Runtime backend and device profile, in this process, measured in the same run (the
limit; `bench_sandbox` compares against the same model's raw `infer`):

- sandboxed adapter in-process (``Adapter.run`` + wasi-nn round trip; `bench_sandbox`);
- HTTP KServe V2 binary ``/v2/models/<m>/infer`` on a real ``wasmgate serve`` (no sandbox);
- HTTP raw adapter ``/v1/adapters/<m>`` (the sandboxed path, as devices use it);
- MQTT 5 request/response on ``adapters/<m>/req`` through a mosquitto with
  ``set_tcp_nodelay true`` (QoS 1; `bench_mqtt` has the stock broker and other requesters);
- HTTP V2 req/s with 8 connections against ORT from 8 threads.

The HTTP figures come from ``wrk`` (`bench.wrk`): a Python client would be the bottleneck.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import bench_http, bench_mqtt, bench_sandbox, wrk
from bench.common import Figure, median, percentile, script_main
from tests.fixtures.benchkit import payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker
from tests.fixtures.zig import compile_c
from wasmgate.device_profiles import detect
from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend
from wasmgate.sandbox import Ceilings, SandboxEngine

Array = npt.NDArray[Any]


def backend_limit(path: Path, x: Array, clients: int, seconds: float) -> list[float]:
    """Latencies of ``infer`` on the daemon's own ONNX Runtime backend (detected device
    profile: same providers, threads and session options the daemon uses), from
    ``clients`` closed-loop threads: the limit any served path is compared with."""
    options = LoadOptions(detect().profile)
    model = create_backend("onnx").load(path.read_bytes(), ModelSpec(path.stem), options)
    try:
        for _ in range(20):
            model.infer([x])
        latencies: list[float] = []
        stop = time.perf_counter() + seconds

        def worker() -> None:
            mine = []
            while (start := time.perf_counter()) < stop:
                model.infer([x])
                mine.append(time.perf_counter() - start)
            latencies.extend(mine)  # list.extend is atomic under the GIL

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return latencies
    finally:
        model.close()


def _p50(name: str, samples: list[float], label: str, raw: list[float], unit: str) -> Figure:
    scale = 1e3 if unit == "ms" else 1e6
    base = median(raw) * scale
    return Figure(label, name, median(samples) * scale, unit, "ORT backend p50", base)


def ladder(
    label: str, path: Path, x: Array, stack: tuple[Daemon, Broker], seconds: float
) -> list[Figure]:
    daemon, broker = stack
    unit = "us" if label == "digits" else "ms"
    raw = backend_limit(path, x, 1, seconds)
    rounds = 10 if seconds < 1 else (300 if label == "digits" else 30)  # as bench_sandbox
    root = Path(tempfile.mkdtemp(prefix="wasmgate-bench-"))
    with (
        SandboxEngine(root / "cache") as engine,
        SandboxEngine(root / "cache0", Ceilings(spare_instances=0)) as spareless,
    ):
        wasm = compile_c([bench_sandbox.GUEST]).read_bytes()
        engines = (engine, spareless)
        sandboxed = bench_sandbox.bench_model(engines, wasm, label, path.read_bytes(), x, rounds)
    in_proc = next(f for f in sandboxed if f.name == "sandboxed request")
    body, headers = bench_http.v2_body(x, "input")
    v2_url = f"{daemon.url}/v2/models/{label}/infer"
    v2 = wrk.run(v2_url, body, headers, 1, seconds)
    adapter = wrk.run(f"{daemon.url}/v1/adapters/{label}", payload(x), {}, 1, seconds)
    topic = f"wasmgate/v1/{bench_mqtt.GATEWAY}/adapters/{label}/req"
    mqtt = bench_mqtt.latencies(broker.port, topic, payload(x), seconds)
    raw8 = backend_limit(path, x, 8, seconds)
    v2_8 = wrk.run(v2_url, body, headers, 8, seconds)
    scale = 1e3 if unit == "ms" else 1e6
    base, base99 = median(raw) * scale, percentile(raw, 99) * scale
    return [
        Figure(label, "sandboxed in-process p50", in_proc.value / (1e3 if unit == "ms" else 1),
               unit, "raw session.run p50", in_proc.baseline / (1e3 if unit == "ms" else 1)),
        Figure(label, "HTTP V2 binary p50 (wrk)", v2.p50 * scale, unit, "ORT backend p50", base),
        Figure(label, "HTTP V2 binary p99 (wrk)", v2.p99 * scale, unit, "ORT backend p99", base99),
        Figure(label, "HTTP raw adapter (sandboxed) p50 (wrk)", adapter.p50 * scale, unit,
               "ORT backend p50", base),
        _p50("MQTT 5 adapter (sandboxed) p50", mqtt, label, raw, unit),
        Figure(label, "HTTP V2 req/s, 8 connections (wrk)", v2_8.rps, "/s", "ORT 8 threads",
               len(raw8) / seconds, lower_is_better=False),
    ]  # fmt: skip


def inputs() -> dict[str, tuple[Path, Array]]:
    m, rng = get_models(), np.random.default_rng(0)
    return {
        "digits": (m.digits_fp32, rng.uniform(0, 16, (1, 64)).astype(np.float32)),
        "mobilenet": (m.mobilenet_fp32, rng.standard_normal((1, 3, 128, 128)).astype(np.float32)),
    }


def run(quick: bool) -> list[Figure]:
    """Both models through every rung; ``quick``: short windows (checks that it runs)."""
    seconds = 0.3 if quick else 5.0
    cases = inputs()
    models = {k: v[0] for k, v in cases.items()}
    with (
        tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp,
        bench_mqtt.daemon_behind(Path(tmp), bench_mqtt.NODELAY_CONF, models) as stack,
    ):
        return [f for k, (p, x) in cases.items() for f in ladder(k, p, x, stack, seconds)]


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()

"""`wrk` (Debian's ``wrk`` package) as the suite's HTTP load generator.

A Python client costs more CPU per request than the servers it measures on a 2-core
machine, so the HTTP figures of the suite come from ``wrk -t1`` (C, epoll): one thread,
``connections`` keep-alive connections, closed loop, for ``seconds``. The POST body and
headers go through a small Lua script (``wrk.method``/``wrk.body``/``wrk.headers``); the
``done`` hook prints the latency percentiles and the non-2xx count as one JSON line, so
nothing is scraped from the human-readable report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WRK = shutil.which("wrk") or "/usr/bin/wrk"

_SCRIPT = """
wrk.method = "POST"
local f = assert(io.open("%(body)s", "rb"))
wrk.body = f:read("*a")
f:close()
%(headers)s
-- No response() hook: it would make wrk hand every body to Lua. Non-2xx answers are
-- counted by wrk itself in summary.errors.status.
done = function(summary, latency, requests)
  io.write(string.format(
    'WRKJSON {"requests": %%d, "seconds": %%f, "p50_us": %%d, "p99_us": %%d, '
    .. '"status_errors": %%d, "socket_errors": %%d}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50), latency:percentile(99),
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: throughput and latency percentiles (seconds)."""

    rps: float
    p50: float
    p99: float
    requests: int


def available() -> bool:
    return Path(WRK).exists()


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid Lua string for ASCII text


def script(body: bytes, headers: dict[str, str], workdir: Path) -> Path:
    """Write the Lua script (and the body next to it) for one request shape."""
    body_file = workdir / "body.bin"
    body_file.write_bytes(body)
    lines = "\n".join(
        f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()
    )
    path = workdir / "post.lua"
    path.write_text(_SCRIPT % {"body": body_file, "headers": lines})
    return path


def run(
    url: str,
    body: bytes,
    headers: dict[str, str],
    connections: int,
    seconds: float,
    *,
    cpus: str | None = None,
    idle: Callable[[], None] | None = None,
) -> WrkResult:
    """POST ``body`` to ``url`` from ``connections`` connections for ``seconds`` (whole
    seconds, at least 1: wrk takes no fractions); ``cpus`` pins wrk (``taskset -c``), so a
    server given other CPUs does not share them with its load generator.

    Raises when any answer is not 2xx or a socket failed: a figure built on errors would
    measure the error path. A window in which no request finished (a short ``--quick``
    window on a loaded machine, slower than one answer) is run again, twice as long, up to
    three times before that counts as a failure too. A window with errors is run once more
    (a loaded CI machine stalled a fresh daemon past a request's 1 s deadline: 8 of 850 in
    one such window); errors again fail it. ``idle``: called before each window, returns
    once the server has finished the requests of the window before (wrk closes its
    connections at the end; the server still runs what they sent: on a loaded machine 16
    of them and 16 new ones filled an adapter's queue, and the new ones were answered 429)."""
    retried = False
    for attempt in range(4):
        if idle is not None:
            idle()
        out, stdout = _once(url, body, headers, connections, seconds * 2**attempt, cpus=cpus)
        if (out["status_errors"] or out["socket_errors"]) and not retried:
            retried = True
            continue
        if out["requests"] or out["status_errors"] or out["socket_errors"]:
            break
    if out["status_errors"] or out["socket_errors"] or not out["requests"]:
        raise RuntimeError(f"{url}: wrk saw errors: {out}\n{stdout}")
    return WrkResult(
        rps=out["requests"] / out["seconds"],
        p50=out["p50_us"] / 1e6,
        p99=out["p99_us"] / 1e6,
        requests=out["requests"],
    )


def _once(
    url: str,
    body: bytes,
    headers: dict[str, str],
    connections: int,
    seconds: float,
    *,
    cpus: str | None,
) -> tuple[dict[str, Any], str]:
    """One wrk run: its WRKJSON figures and its output."""
    with tempfile.TemporaryDirectory(prefix="wasmgate-wrk-") as tmp:
        lua = script(body, headers, Path(tmp))
        pin = ["taskset", "-c", cpus] if cpus is not None else []
        cmd = [*pin, WRK, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
               "--timeout", "10s", "-s", str(lua), url]  # fmt: skip
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=seconds + 60, check=False
        )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout}{done.stderr}")
    out: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
    return out, done.stdout

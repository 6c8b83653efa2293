"""Host memory amplification through wasi-nn, against a real daemon: bounded per request.

The hostile guest is ``nn_proxy`` (it replays wasi-nn calls from its payload) in a bundle
with ``memory_mb = 32``. One request creates ``CONTEXTS`` execution contexts and sets the
same 3.5 MiB input on each: without a bound the daemon would copy 64 x 3.5 = 224 MiB into
host buffers from one request. Bounds stated and checked: at most 16 contexts per instance
(``init_execution_context`` answers ``too_large`` after that), host tensors within the
request's 32 MiB (``set_input`` answers ``too_large`` beyond), so the daemon's peak RSS
stays below idle + ``RSS_HEADROOM_MB`` (guest memory 32 + host tensors 32 + the payload's
copies and slack). The next request of the same bundle and another tenant are served.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.benchkit import BenchKit, daemon_pid, rss_mb
from tests.fixtures.daemon import Daemon
from tests.fixtures.zig import compile_c
from tests.reliability.conftest import digits_payload, post
from tests.reliability.load import RssSampler
from tests.sandbox.helpers import GUESTS, Script, affine_onnx

F32, OK, INVALID_ARGUMENT, TOO_LARGE = 1, 0, 1, 7
CONTEXTS = 64
ROWS = 3.5 * 1024 * 1024 // 16  # [ROWS, 4] FP32 = 3.5 MiB
RSS_HEADROOM_MB = 128


def _hostile() -> Script:
    s = Script()
    s.call("load_by_name", s.blob(b"affine"), 6, s.out())
    nbytes = int(ROWS) * 16
    data = s.blob(b"\1" * nbytes)
    rec = s.tensor([int(ROWS), 4], F32, b"", data_len=nbytes, shared=data)
    for ctx in range(CONTEXTS):
        s.call("init_execution_context", 0, s.out())
        s.call("set_input", ctx, 0, rec)
    return s


def _good() -> Script:
    s = Script()
    s.call("load_by_name", s.blob(b"affine"), 6, s.out())
    s.call("init_execution_context", 0, s.out())
    s.call("set_input", 0, 0, s.tensor([1, 4], F32, struct.pack("<4f", 1, 2, 3, 4)))
    s.call("compute", 0)
    s.call("get_output", 0, 0, s.out(16), 16, s.out())
    return s


@pytest.mark.timeout(180)
async def test_many_contexts_with_big_inputs_are_bounded(
    kit: BenchKit, tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    model = tmp_path / "affine.onnx"
    model.write_bytes(affine_onnx())
    limits = {"memory_mb": 32, "max_input_bytes": 8 << 20, "max_output_bytes": 8 << 20}
    wasm = compile_c([GUESTS / "nn_proxy.c"])
    kit.build("affine", model, limits=limits, wasm=wasm)
    config = {"limits": {"max_output_bytes": 8 << 20}, "http": {"max_body_bytes": 16 << 20}}
    daemon = daemon_factory(config=kit.config(config))
    url = f"{daemon.url}/v1/adapters/affine"
    good = _good()
    status, _, body = post(url, good.payload())
    assert status == 200, body[:200]
    assert good.result(body).errnos == [OK] * 5
    pid = daemon_pid(daemon)
    idle = rss_mb(pid)

    hostile = _hostile()
    with RssSampler(pid) as rss:
        status, _, body = await asyncio.to_thread(post, url, hostile.payload())
    assert status == 200, body[:300]
    errnos = hostile.result(body).errnos
    inits, inputs = errnos[1::2], errnos[2::2]
    assert inits[:16] == [OK] * 16, inits
    assert set(inits[16:]) == {TOO_LARGE}, inits
    accepted = inputs.count(OK)
    assert 1 <= accepted <= 32 // 3.5, inputs  # within the request's 32 MiB
    assert set(inputs[accepted:16]) == {TOO_LARGE}, inputs
    assert set(inputs[16:]) == {INVALID_ARGUMENT}, inputs  # no such context
    assert rss.peak < idle + RSS_HEADROOM_MB, f"peak {rss.peak:.0f} MiB, idle {idle:.0f} MiB"

    status, _, body = post(url, good.payload())
    assert status == 200, body[:200]
    assert good.result(body).errnos == [OK] * 5
    assert post(f"{daemon.url}/v1/adapters/digits", digits_payload())[0] == 200

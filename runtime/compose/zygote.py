"""The zygote's life: import and warm up what every worker needs, then fork workers on request.

``wasmgate serve`` with workers, once it has imported its modules and before it starts a
thread, imports what a worker adds and builds ONNX Runtime's schema registry itself (it
needs both too), then forks the zygote (`fork_early`): the supervisor, the zygote and every
worker share those pages. A zygote that ends is ``exec``ed by the supervisor as
``wasmgate serve --zygote FD`` and warms up on its own. The supervisor's end, the protocol
and why a worker is forked twice: `wasmgate.runtime.supervisor.zygote`. Measured (the demo
bundles, 2 workers): forked from ``serve`` 166.6 MB of PSS for the gateway, an exec'd
zygote 202.9, exec'd workers 212.3.

It stays single-threaded: the imports start no thread of their own but OpenBLAS's pool,
which OpenBLAS parks across ``fork`` (``pthread_atfork``) and which nothing here wakes, and
the schema registry is built by a session with one intra- and one inter-op thread, which
start none. ONNX Runtime's telemetry thread (from its import on) is off unless the operator
turned it on (`wasmgate.runtime.cli`); then there is no zygote. A Python thread in the
zygote makes it refuse to fork. Its collector stays off (as a start's is:
`wasmgate.runtime.ops.startgc`) and what it made is frozen before the first fork, so no
collection in a worker copies the zygote's pages.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from wasmgate.runtime.compose.worker import run_worker
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.ops.parentage import die_with, name_process
from wasmgate.runtime.supervisor.children import decode_spec
from wasmgate.runtime.supervisor.plan import plan_workers
from wasmgate.runtime.supervisor.zygote import SUPERVISOR_ONLY, Seed
from wasmgate.typed import replace

__all__ = ["fork_early", "serve_zygote", "warm"]

_SPEC_MAX = 1 << 20
_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ADOPTED_S = 5.0
"""How long a forked worker waits to become the supervisor's child (its first parent
exits at once; only a supervisor that ended meanwhile makes it wait this long)."""


def fork_early(settings: Settings) -> Seed | None:
    """The zygote, forked now (``wasmgate serve``, before it starts a thread) when the
    settings ask for workers; None when they do not (or no zygote), or a Python thread runs."""
    wanted = settings.workers.zygote and plan_workers(settings, CpuPlan.current()).count > 1
    if not wanted or threading.active_count() != 1 or not _no_telemetry_thread():
        return None
    try:
        warm()  # here: the supervisor imports and builds the same, so all of it is shared
    except Exception:  # the exec'd zygote tries again, and logs why it fails
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    supervisor = os.getpid()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _exit(lambda: serve_zygote(theirs, supervisor, warmed=True))
    theirs.close()
    return Seed(pid, ours)


def serve_zygote(sock: socket.socket, supervisor: int, *, warmed: bool = False) -> int:
    """Warm up (unless forked warm), say ready, fork a worker for each request until the
    supervisor's end closes."""
    name_process("wasmgate-zygote")
    if not die_with(supervisor):
        return 1
    if not _no_telemetry_thread():
        sock.sendall(b"Eno zygote with ONNX Runtime's telemetry on (its thread)")
        return 1
    # A terminal's Ctrl-C reaches the whole process group, and systemd's stop signals every
    # process of the unit: the supervisor stops the gateway, and this process with it (a
    # zygote that ended on its own would be started again). Its workers get them back.
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    for key in [k for k in os.environ if k.startswith(SUPERVISOR_ONLY)]:
        del os.environ[key]  # a forked zygote has the supervisor's environment
    if not warmed:
        warm()
    gc.freeze()
    sock.sendall(b"R")
    while True:
        data, fds, _flags, _addr = socket.recv_fds(sock, _SPEC_MAX, 1)
        if not data:
            return 0  # the supervisor closed its end
        if not fds:
            sock.sendall(b"Eno listening socket in the request")
            continue
        try:
            _answer(sock, data, fds[0], supervisor)
        finally:
            os.close(fds[0])


def _answer(sock: socket.socket, data: bytes, listener: int, supervisor: int) -> None:
    """Fork the worker, tell the supervisor its pid, and only then let it run: a worker
    whose pid never reached the supervisor (this process killed in between) reads the end
    of its pipe and exits, rather than serve unwatched beside the one started instead."""
    try:
        answer, go = _fork_worker(data, listener, sock, supervisor)
    except OSError as e:  # fork refused (EAGAIN, ENOMEM): the supervisor execs this one
        answer, go = f"Ecannot fork: {e}".encode(), None
    try:
        sock.sendall(answer)
        if go is not None:
            os.write(go, b"G")
    finally:
        if go is not None:
            os.close(go)


def warm() -> None:
    """Import the worker's modules and ONNX Runtime, and build its operator-schema
    registry (~8 MB a process otherwise) with one session that starts no thread."""
    import onnx  # noqa: PLC0415 - the zygote's very purpose: imports to share
    import onnxruntime as ort  # noqa: PLC0415

    import wasmgate.runtime.backends.onnx  # noqa: F401, PLC0415

    node = onnx.helper.make_node("Identity", ["x"], ["y"])
    tensor = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [node], "warm", [tensor("x", onnx.TensorProto.FLOAT, [1])],
        [tensor("y", onnx.TensorProto.FLOAT, [1])],
    )  # fmt: skip
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    # The oldest ONNX Runtime a gateway may have (1.23, on Python 3.10) reads IR 11 at most.
    model = onnx.helper.make_model(
        graph, ir_version=8, opset_imports=[onnx.helper.make_opsetid("", 13)]
    ).SerializeToString()
    ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _no_telemetry_thread() -> bool:
    """ONNX Runtime's telemetry, when the operator turned it on, runs a thread from the
    import on: no zygote then (a fork could copy a lock it held; the workers are exec'd)."""
    return os.environ.get("ORT_DISABLE_TELEMETRY") == "1"


def _fork_worker(
    data: bytes, listener: int, sock: socket.socket, supervisor: int
) -> tuple[bytes, int | None]:
    """Fork a worker through a middle process that exits at once: the answer (``P`` and
    the worker's pid, or ``E`` and why not) and the pipe that lets the worker run."""
    if threading.active_count() != 1:
        return b"Ethe zygote runs a thread: it forks no worker", None
    wait, go = os.pipe()
    reader, writer = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(reader)
        os.close(go)
        _exit(lambda: _middle(_Child(data, listener, supervisor, wait), sock, writer))
    os.close(writer)
    os.close(wait)
    with os.fdopen(reader, "rb") as pipe:
        pid = pipe.read(4)
    os.waitpid(middle, 0)  # the worker is the supervisor's child from here on
    if len(pid) != 4:
        os.close(go)
        return b"Ethe worker's fork failed", None
    return b"P" + pid, go


@dataclass(frozen=True)
class _Child:
    """What a forked worker starts from."""

    data: bytes
    listener: int
    supervisor: int
    wait: int
    """Its end of the pipe the zygote writes to once the supervisor has its pid."""


def _middle(child: _Child, sock: socket.socket, pipe: int) -> int:
    pid = os.fork()
    if pid == 0:
        os.close(pipe)
        sock.close()  # a worker cannot ask for workers
        _exit(lambda: _worker(child))
    os.write(pipe, pid.to_bytes(4, "little"))
    return 0


def _worker(child: _Child) -> int:
    """Become the supervisor's child, wait for the zygote's word, then serve
    (`wasmgate.runtime.compose.worker`)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as an exec'd worker has them
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    deadline = time.monotonic() + _ADOPTED_S
    while os.getppid() != child.supervisor:  # the middle process is exiting
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.001)
    if not die_with(child.supervisor):
        return 1
    with os.fdopen(child.wait, "rb") as pipe:
        if pipe.read(1) != b"G":
            return 1  # the supervisor never heard of this process
    spec = replace(decode_spec(child.data), listen_fd=child.listener)
    name_process(f"wasmgate-w{spec.index}")
    return asyncio.run(run_worker(spec))


def _exit(body: Callable[[], int]) -> NoReturn:
    """Run ``body`` in a forked child and end the child with its code, never returning into
    the parent's stack (its ``finally`` blocks and handlers are the parent's)."""
    code = 1
    try:
        code = body()
    except BaseException:  # the child ends here whatever happened
        traceback.print_exc()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)

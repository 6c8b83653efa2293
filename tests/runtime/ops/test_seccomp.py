"""The worker's system call filter (`wasmgate.runtime.ops.seccomp`): its numbers are the
kernel headers' and, installed, it refuses those calls with EPERM that worked before."""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wasmgate.runtime.ops.seccomp import DENIED, numbers

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),  # arm64 uses the generic table
}


@pytest.mark.parametrize("machine", sorted(HEADERS))
def test_the_numbers_are_the_kernel_headers(machine: str) -> None:
    header = HEADERS[machine]
    if not header.exists():
        pytest.skip(f"{header} not installed (linux-libc-dev)")
    text = header.read_text()
    for name, number in numbers(machine).items():
        found = re.search(rf"#define __NR(?:3264)?_{name}\s+(\d+)", text)
        assert found is not None, name
        assert int(found.group(1)) == number, name
    assert set(numbers(machine)) == set(DENIED)


CHILD = """
import ctypes, json, os
from wasmgate.runtime.ops import landlock, seccomp
from wasmgate.runtime.ops.seccomp import numbers
import platform
libc = ctypes.CDLL(None, use_errno=True)
nr = numbers(platform.machine())
calls = {  # harmless arguments: each does nothing, or fails for its arguments
    "unshare": (0,), "process_vm_readv": (os.getpid(), None, 0, None, 0, 0),
    "io_uring_setup": (0, None), "bpf": (-1, None, 0), "keyctl": (0, -2, 0),
    "perf_event_open": (None, 0, -1, -1, 0), "kcmp": (os.getpid(), os.getpid(), 0, 0, 0),
}
def run():
    out = {}
    for name, args in calls.items():
        result = libc.syscall(nr[name], *args)
        out[name] = "ok" if result >= 0 else os.strerror(ctypes.get_errno())
    out["getpid"] = "ok" if os.getpid() == libc.getpid() else "no"
    return out
before = run()
landlock.no_new_privs()
assert seccomp.deny()
print(json.dumps({"before": before, "after": run()}))
"""


@pytest.mark.skipif(not numbers(platform.machine()), reason="no numbers for this architecture")
def test_the_filter_refuses_what_worked_before() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    eperm = "Operation not permitted"
    refused_before = {k for k, v in found["before"].items() if v == eperm}
    assert refused_before == set(), f"no control: {refused_before} refused unfiltered"
    assert {k: v for k, v in found["after"].items() if k != "getpid"} == {
        k: eperm for k in found["after"] if k != "getpid"
    }
    assert found["after"]["getpid"] == "ok"  # the rest goes through

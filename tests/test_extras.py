"""A command that needs the ``sdk`` extra, on an install without it, says in one line which
extra to install and exits 2; what the core does (the demo) never needs it.

The missing distributions are hidden by `tests.fixtures.without` (a meta-path finder in the
child process), the way an install without the extra lacks them. The hint names the command
that works here (this interpreter's pip and the checkout this install came from: wasmgate is
on no package index), and a test runs it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cache import cache_dir

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "guest_adapters" / "examples"
HINT = f"{sys.executable} -m pip install '{REPO}[sdk]'"


def _run(hidden: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``args`` as a command with ``hidden`` distributions missing. wasmgate's build cache
    is the test's own (the build must run); Zig's compiled libc is the test cache's (cold,
    it took over 120 s on a loaded 2-CPU machine: not what these tests are about)."""
    cmd = [sys.executable, "-m", "tests.fixtures.without", hidden, "--", *map(str, args)]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "XDG_CACHE_HOME": str(cwd / "cache"),
        "ZIG_GLOBAL_CACHE_DIR": str(cache_dir("zig-global")),
    }
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _refused_in_one_line(done: subprocess.CompletedProcess[str], command: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no traceback, no second line
    assert lines[0].startswith(f"wasmgate {command}: "), lines[0]
    assert lines[0].endswith(HINT), lines[0]


def test_adapter_build_without_zig_names_the_extra(tmp_path: Path) -> None:
    out = tmp_path / "a.wasm"
    done = _run("ziglang", "adapter", "build", EXAMPLES / "digits", "--out", out, cwd=tmp_path)
    _refused_in_one_line(done, "adapter")
    assert not out.exists()


def test_the_same_build_with_zig_works(tmp_path: Path) -> None:
    """The control: only the hidden distribution made the difference above."""
    out = tmp_path / "a.wasm"
    done = _run("", "adapter", "build", EXAMPLES / "digits", "--out", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == (EXAMPLES / "digits" / "adapter.wasm").read_bytes()


def test_bundle_build_of_a_newer_source_without_zig_names_the_extra(tmp_path: Path) -> None:
    src = tmp_path / "digits"
    shutil.copytree(EXAMPLES / "digits", src)
    wasm = src / "adapter.wasm"
    os.utime(wasm, ns=(1, 1))  # the source is newer: bundle build wants to rebuild it
    key = tmp_path / "k.key"
    assert _run("", "keygen", "--out", key, cwd=tmp_path).returncode == 0
    done = _run("ziglang", "bundle", "build", src, "--key", key, "--out", "x.wgb", cwd=tmp_path)
    _refused_in_one_line(done, "bundle")
    assert not (tmp_path / "x.wgb").exists()


def test_int4_quantize_without_onnx_ir_names_the_extra(tmp_path: Path) -> None:
    model = REPO / "guest_adapters" / "models" / "digits-fp32.onnx"
    out = tmp_path / "q.onnx"
    done = _run("onnx_ir", "quantize", model, "--int4", "--out", out, cwd=tmp_path)
    _refused_in_one_line(done, "quantize")
    assert not out.exists()


@pytest.mark.parametrize("hidden", ["ziglang,onnx_ir,sympy"])
def test_operator_commands_run_without_the_sdk(tmp_path: Path, hidden: str) -> None:
    for args in (["--version"], ["doctor", "--help"], ["adapter", "examples"]):
        done = _run(hidden, *args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)


@pytest.mark.timeout(300)
def test_the_hint_is_a_command_that_works_here(tmp_path: Path) -> None:
    """The hint, run as printed (``--dry-run``: it resolves the checkout's sdk extra against
    this environment and installs nothing)."""
    done = _run("ziglang", "adapter", "build", EXAMPLES / "digits", "--out", "a.wasm", cwd=tmp_path)
    command = done.stderr.strip().split("extra: ", 1)[1]
    proc = subprocess.run(
        [*shlex.split(command), "--dry-run", "--no-build-isolation", "-q"],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "No matching distribution" not in proc.stderr


def test_the_debian_packages_hint_points_to_an_environment_of_its_own() -> None:
    code = (
        "import sys; sys.prefix = '/opt/wasmgate'; from wasmgate.extras import install_hint; "
        "print(install_hint('sdk'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "the Debian package carries no SDK" in out
    assert "pip install '.[sdk]'" in out
    assert "pip install 'wasmgate" not in out

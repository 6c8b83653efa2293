"""`wasmgate run-guest` and the GuestRunner behind it, with a real WASI command guest."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.backends import cpu_profile, load_model
from tests.runtime.backends.models import affine_tflite
from tests.sandbox.helpers import affine_onnx
from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.cli._models import PreloadedModels
from wasmgate.sandbox import AdapterLoadError, GuestTrap, ModelHandle
from wasmgate.sandbox.runner import DirMapping, GuestRunner, NnPreload

EXPECTED = "3.0 5.0 7.0 9.0\n"


@pytest.fixture(scope="module")
def command(zig_cc: Callable[..., Path]) -> Path:
    return zig_cc([Path(__file__).parent / "guests" / "nn_command.c"], reactor=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "input.bin").write_bytes(struct.pack("<4f", 1, 2, 3, 4))
    (tmp_path / "model.onnx").write_bytes(affine_onnx())
    (tmp_path / "model.tflite").write_bytes(affine_tflite())
    return tmp_path


def preloaded(named: dict[str, ModelHandle] | None = None) -> PreloadedModels:
    return PreloadedModels(named or {}, LoadOptions(cpu_profile()))


def runner(workdir: Path, *args: str, **kw: object) -> GuestRunner:
    models = preloaded({"default": load_model(affine_onnx())})
    return GuestRunner(models, [DirMapping(workdir, ".")], args=list(args), **kw)  # type: ignore[arg-type]


def test_named_model(command: Path, workdir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert runner(workdir, "name", "input.bin").run(command.read_bytes()) == 0
    assert capfd.readouterr().out == EXPECTED


def test_load_from_bytes_read_through_wasi(
    command: Path, workdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert runner(workdir, "bytes", "input.bin", "model.onnx").run(command.read_bytes()) == 0
    assert capfd.readouterr().out == EXPECTED


def test_exit_code_and_env(command: Path, workdir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    r = runner(workdir, "name", "input.bin", env=[("EXIT_CODE", "7")])
    assert r.run(command.read_bytes()) == 7
    assert capfd.readouterr().out == EXPECTED


def test_only_named_dirs_are_visible(
    command: Path, workdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert runner(workdir, "peek", "/etc/passwd").run(command.read_bytes()) == 0
    assert runner(workdir, "peek", "../input.bin").run(command.read_bytes()) == 0
    assert runner(workdir, "peek", "input.bin").run(command.read_bytes()) == 0
    assert capfd.readouterr().out == "no access\nno access\nreadable\n"


def test_read_only_dir(command: Path, workdir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    models = preloaded()
    ro = GuestRunner(models, [DirMapping(workdir, ".", read_only=True)], args=["write", "new.txt"])
    rw = GuestRunner(models, [DirMapping(workdir, ".")], args=["write", "new2.txt"])
    assert ro.run(command.read_bytes()) == 0
    assert rw.run(command.read_bytes()) == 0
    assert capfd.readouterr().out == "no access\nwritten\n"
    assert not (workdir / "new.txt").exists()
    assert (workdir / "new2.txt").exists()


def test_unknown_preload_name_is_not_found(
    command: Path, workdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    r = GuestRunner(preloaded(), [DirMapping(workdir, ".")], args=["name", "input.bin"])
    assert r.run(command.read_bytes()) == 5
    assert "load failed: 8" in capfd.readouterr().err
    assert r.log == ["wasi-nn load_by_name: no model named 'default'"]


def test_reactor_and_unknown_imports_are_refused(guest_wasm: Callable[[str], bytes]) -> None:
    # A daemon adapter (reactor, wasmgate host API): the error says what to use instead.
    with pytest.raises(AdapterLoadError, match="wasmgate adapter test") as exc:
        GuestRunner(preloaded()).run(guest_wasm("nn_proxy"))
    assert "this is a wasmgate adapter" in str(exc.value)
    import wasmtime  # noqa: PLC0415

    unknown = bytes(wasmtime.wat2wasm('(module (import "env" "f" (func)))'))
    with pytest.raises(AdapterLoadError, match="unsupported import `env::f`"):
        GuestRunner(preloaded()).run(unknown)

    with pytest.raises(AdapterLoadError, match="no `_start`"):
        GuestRunner(preloaded()).run(bytes(wasmtime.wat2wasm("(module)")))
    trap = bytes(wasmtime.wat2wasm('(module (func (export "_start") unreachable))'))
    with pytest.raises(GuestTrap, match="unreachable"):
        GuestRunner(preloaded()).run(trap)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("m:pytorch:cpu:x.pt", "encoding"),
        ("m:onnx:fpga:x.onnx", "target"),
        ("m:onnx:cpu", "NAME:ENCODING:TARGET:PATH"),
    ],
)
def test_bad_preload_syntax(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        NnPreload.parse(text)


def test_preload_and_dir_syntax(tmp_path: Path) -> None:
    assert NnPreload.parse("default:ONNX:CPU:m.onnx") == NnPreload(
        "default", "onnx", "cpu", Path("m.onnx")
    )
    assert NnPreload.parse("d:TensorflowLite:AUTO:m.tflite").encoding == "tensorflowlite"
    assert DirMapping.parse(f"{tmp_path}:/data:ro") == DirMapping(tmp_path, "/data", read_only=True)
    assert DirMapping.parse(str(tmp_path)) == DirMapping(tmp_path, str(tmp_path))
    with pytest.raises(ValueError, match="not a directory"):
        DirMapping.parse(f"{tmp_path}/nope:/x")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "wasmgate", "run-guest", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_cli_like_wasmedge(command: Path, workdir: Path) -> None:
    proc = cli(
        str(command), "--dir", ".:.", "--nn-preload", "default:ONNX:CPU:model.onnx",
        "--env", "EXIT_CODE=3", "--", "name", "input.bin", cwd=workdir,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (3, EXPECTED), proc.stderr


def test_cli_runs_a_guest_using_wasmedges_single_step_calls(command: Path, workdir: Path) -> None:
    # The guest imports load_by_name_with_config, compute_single, get_output_single and
    # fini_single (a WasmEdge LLM-style loop); run-guest links them and the loop ends after
    # the model's one step (exit 0 only if exactly one step ran and fini_single succeeded).
    proc = cli(
        str(command), "--dir", ".:.", "--nn-preload", "default:ONNX:CPU:model.onnx",
        "--", "single", "input.bin", cwd=workdir,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, EXPECTED), proc.stderr


def test_cli_errors(command: Path, workdir: Path) -> None:
    proc = cli(str(command), "--nn-preload", "default:ONNX:CPU:missing.onnx", cwd=workdir)
    assert proc.returncode == 1
    assert "cannot read missing.onnx" in proc.stderr
    proc = cli(str(command), "--dir", "nope:/x", cwd=workdir)
    assert proc.returncode == 2
    assert "not a directory" in proc.stderr
    (workdir / "trap.wasm").write_bytes(b"\0asm\x01\0\0\0\x0a")
    proc = cli("trap.wasm", cwd=workdir)
    assert proc.returncode == 134
    assert proc.stderr.startswith("error: invalid wasm module")


def test_cli_wasmedge_order(command: Path, workdir: Path) -> None:
    proc = cli(
        "--dir=.:.", "--nn-preload", "default:ONNX:CPU:model.onnx", str(command),
        "name", "input.bin", cwd=workdir,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, EXPECTED), proc.stderr


def test_cli_tflite_preload_with_a_profile(command: Path, workdir: Path) -> None:
    proc = cli(
        str(command), "--dir", ".:.", "--nn-preload", "default:TensorflowLite:CPU:model.tflite",
        "--profile", cpu_profile().name, "--", "name", "input.bin", cwd=workdir,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, EXPECTED), proc.stderr
    assert "XNNPACK" not in proc.stderr  # LiteRT's C++ INFO line stays out of the output
    proc = cli(
        "--profile=no-such-board", "--nn-preload", "default:ONNX:CPU:model.onnx", str(command),
        "name", "input.bin", cwd=workdir,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "device profile" in proc.stderr
    assert "no-such-board" in proc.stderr


def test_cli_refuses_a_model_the_backend_refuses(command: Path, workdir: Path) -> None:
    (workdir / "bad.onnx").write_bytes(b"not onnx at all")
    proc = cli(str(command), "--nn-preload", "default:ONNX:CPU:bad.onnx", cwd=workdir)
    assert proc.returncode == 1
    assert "cannot load bad.onnx: not a valid ONNX model" in proc.stderr

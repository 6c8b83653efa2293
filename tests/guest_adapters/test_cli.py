"""``wasmgate adapter build|new|test|examples`` as a user runs them (real subprocesses)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.cache import cache_dir
from tests.sandbox.helpers import cpu_profile
from wasmgate.guest_adapters.examples import example_dir, models_dir


def wasmgate(*args: str | Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env_cache = {"WASMGATE_BUILD_CACHE": str(cache_dir("adapters"))}
    return subprocess.run(
        [sys.executable, "-m", "wasmgate", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=600,
        check=False,
        env={**os.environ, **env_cache},
    )


def test_build_writes_a_stripped_reactor_module(tmp_path: Path) -> None:
    out = tmp_path / "digits.wasm"
    done = wasmgate("adapter", "build", example_dir("digits"), "--out", out)
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"sha256 {digest}" in done.stdout.decode()
    assert out.stat().st_size < 100_000
    again = wasmgate("adapter", "build", example_dir("digits") / "adapter.c", "--out", out)
    assert b"(cached)" in again.stdout


def test_build_reports_compiler_errors(tmp_path: Path) -> None:
    src = tmp_path / "broken.c"
    src.write_text('#include "wasmgate.h"\nint handle(void) { return undefined_thing; }\n')
    done = wasmgate("adapter", "build", src, "--out", tmp_path / "x.wasm")
    assert done.returncode == 1
    assert b"undefined_thing" in done.stderr
    assert b"compiling broken.c failed" in done.stderr
    missing = wasmgate("adapter", "build", tmp_path / "nope.c", "--out", tmp_path / "x.wasm")
    assert missing.returncode == 2
    assert b"no such file or directory" in missing.stderr


def test_test_runs_a_payload_from_stdin_and_from_files() -> None:
    src = example_dir("digits")
    done = wasmgate(
        "adapter", "test", src, "--payload", "-",
        stdin=(src / "samples" / "zero.json").read_bytes(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["digit"] == 0
    assert b"status 0 (ok)" in done.stderr
    amb = wasmgate("adapter", "test", src, "--payload", src / "samples" / "ambiguous.json")
    assert b"asks for cloud fallback: low confidence" in amb.stderr
    bad = wasmgate("adapter", "test", src, "--payload", src / "samples" / "malformed.json")
    assert bad.returncode == 1
    assert b"status 1 (bad input)" in bad.stderr


def test_test_takes_models_and_params_for_a_bare_wasm(tmp_path: Path) -> None:
    wasm = tmp_path / "a.wasm"
    assert wasmgate("adapter", "build", example_dir("digits"), "--out", wasm).returncode == 0
    zero = example_dir("digits") / "samples" / "zero.json"
    done = wasmgate(
        "adapter", "test", wasm, "--payload", zero,
        "--model", f"digits-mlp={models_dir() / 'digits-int8.onnx'}",
        "--param", "confidence_threshold=1.5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"low confidence" in done.stderr  # the param reached the guest
    no_model = wasmgate("adapter", "test", wasm, "--payload", zero)
    assert no_model.returncode == 1
    assert b"digits model failed: not found" in no_model.stderr


def test_test_loads_tflite_and_int8_models_with_a_profile(tmp_path: Path) -> None:
    src, zero = example_dir("digits"), example_dir("digits") / "samples" / "zero.json"
    for model in ("digits-int8.tflite", "digits-fp32.tflite", "digits-int8.onnx"):
        done = wasmgate(
            "adapter", "test", src, "--payload", zero, "--profile", cpu_profile().name,
            "--model", f"digits-mlp={models_dir() / model}",
        )  # fmt: skip
        assert done.returncode == 0, (model, done.stderr)
        assert json.loads(done.stdout)["digit"] == 0
    (tmp_path / "bad.onnx").write_bytes(b"not onnx")
    bad = wasmgate(
        "adapter", "test", src, "--payload", zero, "--model", f"digits-mlp={tmp_path}/bad.onnx"
    )
    assert bad.returncode == 1
    assert b"model digits-mlp: cannot load" in bad.stderr
    board = wasmgate("adapter", "test", src, "--payload", zero, "--profile", "no-such-board")
    assert board.returncode == 2
    assert b"device profile" in board.stderr


def test_all_samples_of_the_anomaly_example() -> None:
    done = wasmgate("adapter", "test", example_dir("vibration-anomaly"))
    lines = dict(line.split(": ", 1) for line in done.stdout.decode().splitlines())
    assert json.loads(lines["spike.json"])["anomaly"] is True
    assert json.loads(lines["normal.json"])["anomaly"] is False
    assert b"spike.json: event: " in done.stderr
    assert done.returncode == 1  # malformed.json is among the samples, on purpose


def test_new_from_an_example_builds_and_runs(tmp_path: Path) -> None:
    dest = tmp_path / "my-digits"
    done = wasmgate("adapter", "new", dest, "--from", "digits")
    assert done.returncode == 0, done.stderr
    toml = (dest / "bundle.toml").read_text()
    assert 'name = "my-digits"' in toml
    assert "../../models" not in toml
    built = wasmgate("adapter", "build", dest, "--out", dest / "adapter.wasm")
    assert built.returncode == 0, built.stderr
    ran = wasmgate("adapter", "test", dest, "--payload", dest / "samples" / "three.bin")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["digit"] == 3
    again = wasmgate("adapter", "new", dest)
    assert again.returncode == 1
    assert b"not empty" in again.stderr


def test_examples_lists_every_example() -> None:
    done = wasmgate("adapter", "examples")
    names = {line.split("\t")[0] for line in done.stdout.decode().splitlines()}
    assert names == {"digits", "digits-pipeline", "digits-zig", "vibration-anomaly"}

"""``wasmgate adapter build|new|test|examples`` as a user runs them (real subprocesses)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.backends import cpu_profile
from tests.fixtures.cache import cache_dir
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
    # malformed.json fails on purpose and samples/expect.toml says so: the run passes.
    assert b"malformed.json: status 1 (bad input)" in done.stderr
    assert b"as expected by samples/expect.toml" in done.stderr
    assert done.returncode == 0, done.stderr


def test_unmet_expectations_fail_the_run(tmp_path: Path) -> None:
    dest = tmp_path / "mine"
    assert wasmgate("adapter", "new", dest, "--from", "digits").returncode == 0
    expect = dest / "samples" / "expect.toml"
    expect.write_text('"malformed.json" = 1\n"zero.json" = 1\n')
    done = wasmgate("adapter", "test", dest)
    assert done.returncode == 1
    assert b"zero.json: status 0 (ok)" in done.stderr
    assert b"UNEXPECTED by samples/expect.toml (status 1)" in done.stderr
    expect.write_text('"gone.json" = 1\n')
    assert b"no such sample: gone.json" in wasmgate("adapter", "test", dest).stderr
    expect.write_text('"zero.json" = "ok"\n')
    assert b"want a status 0, 1 or 2" in wasmgate("adapter", "test", dest).stderr


def test_new_from_an_example_builds_and_runs(tmp_path: Path) -> None:
    dest = tmp_path / "my-digits"
    done = wasmgate("adapter", "new", dest, "--from", "digits")
    assert done.returncode == 0, done.stderr
    # the trust the bundle needs: its own name and its model's
    assert b"trust add KEY.pub --names my-digits --names digits-mlp" in done.stdout
    toml = (dest / "bundle.toml").read_text()
    assert 'name = "my-digits"' in toml
    assert "../../models" not in toml
    assert str(models_dir()) not in toml  # no path into site-packages
    assert 'fp32 = "models/digits-fp32.onnx"' in toml
    assert toml.startswith("# my-digits: started from a wasmgate example")
    assert "The digits example" not in toml
    assert (dest / "models" / "digits-int8.onnx").read_bytes() == (
        models_dir() / "digits-int8.onnx"
    ).read_bytes()
    built = wasmgate("adapter", "build", dest, "--out", dest / "adapter.wasm")
    assert built.returncode == 0, built.stderr
    ran = wasmgate("adapter", "test", dest, "--payload", dest / "samples" / "three.bin")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["digit"] == 3
    again = wasmgate("adapter", "new", dest)
    assert again.returncode == 1
    assert b"not empty" in again.stderr
    moved = dest.rename(tmp_path / "elsewhere")  # self-contained: the copy can move
    every = wasmgate("adapter", "test", moved)  # an unmodified copy passes all its samples
    assert every.returncode == 0, every.stderr


def test_bundle_build_rebuilds_an_adapter_older_than_its_source(tmp_path: Path) -> None:
    dest, key = tmp_path / "mine", tmp_path / "k.key"
    assert wasmgate("adapter", "new", dest, "--from", "digits").returncode == 0
    assert wasmgate("keygen", "--out", key).returncode == 0
    assert wasmgate("adapter", "build", dest, "--out", dest / "adapter.wasm").returncode == 0
    old = hashlib.sha256((dest / "adapter.wasm").read_bytes()).hexdigest()
    src = dest / "adapter.c"
    src.write_text(src.read_text().replace("low confidence", "not sure at all"))
    # The module is made a second older than its source (not the source newer than now:
    # a rebuild within that second would look stale again to the next build).
    earlier = src.stat().st_mtime_ns - 1_000_000_000
    os.utime(dest / "adapter.wasm", ns=(earlier, earlier))
    done = wasmgate("bundle", "build", dest, "--key", key, "--out", tmp_path / "b.wgb")
    assert done.returncode == 0, done.stderr
    assert b"adapter.wasm: built from source (the source was newer)" in done.stdout
    new = hashlib.sha256((dest / "adapter.wasm").read_bytes()).hexdigest()
    assert new != old
    shown = wasmgate("bundle", "inspect", tmp_path / "b.wgb", "--json")
    assert json.loads(shown.stdout)["manifest"]["files"]["adapter.wasm"]["sha256"] == new
    again = wasmgate("bundle", "build", dest, "--key", key, "--out", tmp_path / "c.wgb")
    assert b"built from source" not in again.stdout  # current now: kept as built


CORE_INSTALL = (
    "import sys; sys.modules['ziglang'] = None; "  # no `sdk` extra: Zig cannot be imported
    "from wasmgate.runtime.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_copied_example_bundles_without_the_sdk(tmp_path: Path) -> None:
    """docs/fleet.md step 4 on a core install: `adapter new --from digits` copies the
    prebuilt module, so `bundle build` needs no compiler (issue 50 item 7)."""
    dest, key = tmp_path / "my-digits", tmp_path / "k.key"
    assert wasmgate("adapter", "new", dest, "--from", "digits").returncode == 0
    assert wasmgate("keygen", "--out", key).returncode == 0
    core = [sys.executable, "-c", CORE_INSTALL, "bundle", "build", str(dest), "--key", str(key)]
    done = subprocess.run([*core, "--out", str(tmp_path / "b.wgb")], capture_output=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"from source" not in done.stdout  # the example's own module, as shipped
    (dest / "adapter.wasm").unlink()  # gone: the message says so instead of "newer"
    done = wasmgate("bundle", "build", dest, "--key", key, "--out", tmp_path / "c.wgb")
    assert b"adapter.wasm: built from source (there was no adapter.wasm)" in done.stdout


def test_examples_lists_every_example() -> None:
    done = wasmgate("adapter", "examples")
    names = {line.split("\t")[0] for line in done.stdout.decode().splitlines()}
    assert names == {"digits", "digits-pipeline", "digits-zig", "vibration-anomaly"}
    path = wasmgate("adapter", "examples", "--path").stdout.decode()
    assert path.count("\n") == 1
    assert (Path(path.strip()) / "digits" / "samples" / "zero.json").is_file()  # S=$(...)

"""The examples' shipped ``adapter.wasm`` are exactly what their sources build to.

Every example is compiled again with Zig and an empty build cache (a real compile, never a
cached result), and the bytes are compared with the module in the repository (the wheel
ships the same files). So the prebuilt modules the demo serves can never go stale: editing
an example's source without regenerating (docs/CONTRIBUTING.md) fails here.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wasmgate.guest_adapters.prebuilt import PREBUILT, build_examples, example_sources, main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "guest_adapters" / "examples"


@pytest.mark.timeout(600)  # a cold Zig cache builds wasi-libc first
def test_shipped_modules_are_what_the_sources_build() -> None:
    outcomes = build_examples(EXAMPLES, check=True)
    assert [o.name for o in outcomes] == [p.name for p in example_sources(EXAMPLES)]
    assert len(outcomes) >= 4
    stale = [o.name for o in outcomes if not o.current]
    assert not stale, f"regenerate the prebuilt modules (docs/CONTRIBUTING.md): {stale}"


def test_every_example_ships_its_module() -> None:
    """An example without one would make the demo compile (a gateway has no Zig)."""
    for src in example_sources(EXAMPLES):
        assert (src / PREBUILT).stat().st_size > 1000, src.name


@pytest.mark.timeout(600)
def test_a_stale_module_is_found_and_regenerated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "examples"
    shutil.copytree(EXAMPLES / "digits", root / "digits")
    wasm = root / "digits" / PREBUILT
    good = wasm.read_bytes()
    wasm.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit: a stale build
    assert main([str(root), "--check"]) == 1
    assert "STALE" in capsys.readouterr().out
    assert wasm.read_bytes() != good  # --check writes nothing
    assert main([str(root)]) == 0
    assert wasm.read_bytes() == good
    assert main([str(root), "--check"]) == 0


@pytest.mark.timeout(600)
def test_the_documented_regeneration_command_runs() -> None:
    """docs/CONTRIBUTING.md's command, verbatim: it rebuilds every module and, with the
    modules current, rewrites none (each line says ``current``)."""
    doc = (REPO / "docs" / "CONTRIBUTING.md").read_text(encoding="utf-8")
    command = next(
        line.strip() for line in doc.splitlines() if "-m wasmgate.guest_adapters.prebuilt" in line
    )
    assert command.startswith("python -m ")
    argv = [sys.executable, *shlex.split(command)[1:]]
    before = {p: p.read_bytes() for p in EXAMPLES.glob(f"*/{PREBUILT}")}
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == len(before)
    assert all(line.endswith(": current") for line in lines), done.stdout
    assert {p: p.read_bytes() for p in before} == before

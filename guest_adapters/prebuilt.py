"""The example adapters' prebuilt modules: regenerate them from source, or check them.

Every example ships its ``adapter.wasm`` next to its source (in the repository and in the
wheel), so ``wasmgate serve --demo`` never runs a compiler: a gateway needs no Zig. The
modules can never go stale unnoticed because Zig builds are reproducible: the same
compiler (``ziglang`` is pinned exactly by the ``sdk`` extra), flags and sources give the
same bytes — the modules are stripped (``-s``/``-fstrip``: no debug info, so no source
paths) and wasm-ld writes no build id unless asked. ``--check`` compiles every example with
an empty build cache and compares the bytes with the shipped ones.

    python -m wasmgate.guest_adapters.prebuilt guest_adapters/examples          # regenerate
    python -m wasmgate.guest_adapters.prebuilt guest_adapters/examples --check  # exit 1 if stale
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wasmgate.guest_adapters.build import build_adapter, package_root, zig_version

__all__ = ["PREBUILT", "Outcome", "build_examples", "example_sources", "main"]

PREBUILT = "adapter.wasm"
"""The module's file name in each example (the name its ``bundle.toml`` gives)."""


@dataclass(frozen=True)
class Outcome:
    """One example: its shipped module, and whether it held exactly the built bytes."""

    name: str
    wasm: Path
    current: bool


def example_sources(root: Path) -> list[Path]:
    """The example folders under ``root``: those with ``adapter.c`` or ``adapter.zig``."""
    return sorted(
        p for p in root.iterdir() if (p / "adapter.c").is_file() or (p / "adapter.zig").is_file()
    )


def build_examples(root: Path, *, check: bool = False) -> list[Outcome]:
    """Compile every example under ``root`` with an empty build cache (a real compile, never
    a cached result); write ``adapter.wasm`` unless ``check``. Returns what was found."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="wasmgate-prebuilt-") as tmp:
        for src in example_sources(root):
            built = build_adapter(src, cache_dir=Path(tmp) / "cache")
            fresh = built.path.read_bytes()
            wasm = src / PREBUILT
            current = wasm.is_file() and wasm.read_bytes() == fresh
            if not current and not check:
                wasm.write_bytes(fresh)
            outcomes.append(Outcome(src.name, wasm, current))
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wasmgate.guest_adapters.prebuilt",
        description="Regenerate (or --check) the example adapters' prebuilt adapter.wasm.",
    )
    parser.add_argument(
        "root",
        type=Path,
        nargs="?",
        default=package_root() / "examples",
        help="The examples folder (default: the installed package's).",
    )
    parser.add_argument("--check", action="store_true", help="Compare only; exit 1 if stale.")
    args = parser.parse_args(argv)
    outcomes = build_examples(args.root, check=args.check)
    stale = [o for o in outcomes if not o.current]
    for o in outcomes:
        state = "current" if o.current else ("STALE" if args.check else "rewritten")
        print(f"{o.wasm}: {state}")
    if args.check and stale:
        print(
            f"{len(stale)} prebuilt module(s) differ from what Zig {zig_version()} builds from "
            "their sources: regenerate them (docs/CONTRIBUTING.md)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compile C adapters to ``wasm32-wasi`` reactor modules with Zig's C compiler from PyPI.

``build_adapter(src)`` accepts one ``.c`` file or a directory (every ``*.c`` in it, sorted;
or, with no C files, its ``adapter.zig`` built by ``zig build-exe``)
and returns the ``.wasm`` bytes' path in a content-addressed cache: the key hashes the
compiler version, the flags, every source and header next to the sources, and the SDK
headers, so editing any of them rebuilds and nothing else does. The SDK include directory
comes from the installed package (``importlib.resources``), so an author needs only pip.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from wasmgate.extras import require
from wasmgate.guest_adapters.errors import AdapterBuildError, AdapterSourceError

__all__ = [
    "CFLAGS",
    "ZIGFLAGS",
    "BuiltAdapter",
    "Progress",
    "build_adapter",
    "default_cache_dir",
    "log_progress",
    "package_root",
    "refresh_adapter",
    "sdk_dir",
    "zig_version",
]

# Optimized, stripped, reactor (no main; the host calls _initialize then the exports).
CFLAGS: tuple[str, ...] = (
    "--target=wasm32-wasi",
    "-O2",
    "-mexec-model=reactor",
    "-s",
    "-std=gnu11",
    "-Wall",
    "-Wextra",
    "-Werror=implicit-function-declaration",
    # Zig's default wasm stack is 16 MiB, which alone breaks a 16 MiB manifest memory limit;
    # 256 KiB is plenty for adapters (keep big buffers static, not on the stack).
    "-Wl,-z,stack-size=262144",
)
# The same module shape from Zig source: reactor, exported `export fn`s, small stack, stripped.
ZIGFLAGS: tuple[str, ...] = (
    "-target",
    "wasm32-wasi",
    "-O",
    "ReleaseSmall",
    "-fno-entry",
    "-rdynamic",
    "-mexec-model=reactor",
    "--stack",
    "262144",
    "-fstrip",
)
_COMPILE_TIMEOUT_S = 600.0  # a cold Zig cache compiles wasi-libc first (tens of seconds)
_FIRST_TICK_S, _TICK_S = 5.0, 10.0  # a warm build takes about a second: no line at all

Progress = Callable[[str], None]
"""Told about a long compile every few seconds (the first Zig run builds wasi-libc)."""

log = logging.getLogger("wasmgate.build")


def log_progress(message: str) -> None:
    """The default `Progress`: an INFO line on the ``wasmgate.build`` logger."""
    log.info(message)


@dataclass(frozen=True)
class BuiltAdapter:
    """A compiled adapter: where the module is, its sha256, and whether it came from cache."""

    path: Path
    sha256: str
    cached: bool


def package_root() -> Path:
    """The installed ``wasmgate.guest_adapters`` folder (SDK, examples, models)."""
    return Path(str(resources.files("wasmgate.guest_adapters")))


def sdk_dir() -> Path:
    """Directory holding ``wasmgate.h`` and ``wasi_nn.h`` (the include path for adapters)."""
    return package_root() / "sdk"


def default_cache_dir() -> Path:
    """``$WASMGATE_BUILD_CACHE``, else ``$XDG_CACHE_HOME/wasmgate/adapters``."""
    env = os.environ.get("WASMGATE_BUILD_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "wasmgate" / "adapters"


@cache
def zig_version() -> str:
    """The bundled Zig's version (part of the cache key: a new compiler rebuilds).

    `MissingExtra` when Zig is not installed (a gateway's core install has none)."""
    require("ziglang", "compiling an adapter")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ziglang", "version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise AdapterBuildError(f"cannot run Zig (pip install ziglang): {e}") from e
    return done.stdout.strip()


def _sources(src: Path) -> list[Path]:
    """The C sources, or the one Zig root file (``adapter.zig`` in a directory)."""
    if src.is_file():
        if src.suffix not in (".c", ".zig"):
            raise AdapterSourceError(f"{src}: not a .c or .zig file")
        return [src]
    if src.is_dir():
        found = sorted(src.glob("*.c"))
        if not found and (src / "adapter.zig").is_file():
            found = [src / "adapter.zig"]
        if not found:
            raise AdapterSourceError(f"{src}: no .c files (or adapter.zig) in this directory")
        return found
    raise AdapterSourceError(f"{src}: no such file or directory")


def _is_zig(sources: Sequence[Path]) -> bool:
    return sources[0].suffix == ".zig"


def _inputs(sources: Sequence[Path]) -> list[Path]:
    """Every file the module depends on: the sources, headers (or Zig files) next to them
    and the SDK headers."""
    inputs = list(sources)
    near = "*.zig" if _is_zig(sources) else "*.h"
    inputs += sorted({h for s in sources for h in s.parent.glob(near)} - set(sources))
    return inputs + sorted(sdk_dir().glob("*.h"))


def _cache_key(sources: Sequence[Path], flags: Sequence[str]) -> str:
    h = hashlib.sha256()
    h.update(f"zig {zig_version()}\0{' '.join(flags)}\0".encode())
    for path in _inputs(sources):
        h.update(path.name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _run_compiler(cmd: list[str], cwd: Path, names: str, progress: Progress) -> tuple[int, str]:
    """Run the compiler; while it runs, tell ``progress`` how long it has taken so far."""
    began = time.monotonic()
    with subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        wait = _FIRST_TICK_S
        while True:
            try:
                _out, err = proc.communicate(timeout=wait)  # retrying loses no output
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - began
                if elapsed > _COMPILE_TIMEOUT_S:
                    proc.kill()
                    raise
                progress(
                    f"compiling {names}: {elapsed:.0f} s so far (Zig's first run builds "
                    "wasi-libc once, ~30-60 s; later builds take about a second)"
                )
                wait = _TICK_S
            else:
                return proc.returncode, err


def _compile(
    sources: Sequence[Path], flags: Sequence[str], out: Path, progress: Progress = log_progress
) -> None:
    out = out.resolve()  # absolute paths throughout: the compiler runs in out's directory
    if _is_zig(sources):
        cmd = [sys.executable, "-m", "ziglang", "build-exe", str(sources[0].resolve()), *flags]
        cmd.append(f"-femit-bin={out}")
    else:
        cmd = [sys.executable, "-m", "ziglang", "cc", *flags, "-I", str(sdk_dir().resolve())]
        cmd += [str(s.resolve()) for s in sources] + ["-o", str(out)]
    names = ", ".join(s.name for s in sources)
    try:
        # cwd: zig build-exe may drop intermediate files into it
        code, stderr = _run_compiler(cmd, out.parent, names, progress)
    except (OSError, subprocess.SubprocessError) as e:
        raise AdapterBuildError(f"cannot run the compiler: {e}") from e
    if code != 0 or not out.is_file():
        raise AdapterBuildError(f"compiling {names} failed", stderr.strip())


def refresh_adapter(
    src_dir: Path, wasm: Path, progress: Progress = log_progress
) -> BuiltAdapter | None:
    """Rebuild ``wasm`` from the sources in ``src_dir`` when any of them (or a header) is
    newer than it, or it is missing; None when it is current or there is no source.

    ``bundle build`` calls this so a bundle never ships a module older than its source, while
    a module built by hand after the last edit (other flags, another toolchain) is kept."""
    try:
        sources = _sources(src_dir)
    except AdapterSourceError:
        return None  # a prebuilt module only (Rust, TinyGo, ...): nothing to compare with
    try:
        built_ns = wasm.stat().st_mtime_ns
    except FileNotFoundError:
        built_ns = -1
    if all(p.stat().st_mtime_ns <= built_ns for p in _inputs(sources)):
        return None
    return build_adapter(src_dir, wasm, progress=progress)


def build_adapter(
    src: Path,
    out: Path | None = None,
    *,
    cache_dir: Path | None = None,
    extra_flags: Sequence[str] = (),
    progress: Progress = log_progress,
) -> BuiltAdapter:
    """Compile ``src`` (a ``.c``/``.zig`` file or a directory) to a wasm reactor module.

    The result is cached by content; with ``out`` the module is also copied there. A compile
    that takes more than a few seconds tells ``progress`` how long it has run so far.
    """
    sources = _sources(src)
    flags = (*(ZIGFLAGS if _is_zig(sources) else CFLAGS), *extra_flags)
    key = _cache_key(sources, flags)
    root = cache_dir if cache_dir is not None else default_cache_dir()
    cached_path = root / f"{key}.wasm"
    cached = cached_path.is_file()
    if not cached:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            tmp_out = Path(tmp) / "adapter.wasm"
            _compile(sources, flags, tmp_out, progress)
            tmp_out.replace(cached_path)  # atomic: concurrent builds never see half a file
    digest = hashlib.sha256(cached_path.read_bytes()).hexdigest()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cached_path, out)
    return BuiltAdapter(path=out if out is not None else cached_path, sha256=digest, cached=cached)

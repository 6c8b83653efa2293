"""The bundled example adapters: where they are, and staging one for ``bundle build``.

Each example is ``examples/<name>/`` with ``adapter.c`` (or ``adapter.zig``), its prebuilt
``adapter.wasm`` (see `wasmgate.guest_adapters.prebuilt`), ``bundle.toml``, ``README.md``
and ``samples/``. Its ``bundle.toml`` names ``adapter.wasm`` and models as
``../../models/<file>``.
The package folder may be read-only (an installed wheel), so ``stage_example`` lays out a
writable copy with the same relative paths: ``<root>/examples/<name>/{bundle.toml,
adapter.wasm}`` and ``<root>/models`` linking to the packaged models.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from wasmgate._compat import tomllib
from wasmgate.guest_adapters.build import build_adapter, package_root
from wasmgate.guest_adapters.errors import AdapterSourceError

__all__ = ["example_dir", "example_names", "models_dir", "reachable_names", "stage_example"]


def models_dir() -> Path:
    """The packaged model files (``guest_adapters/models``)."""
    return package_root() / "models"


def example_dir(name: str) -> Path:
    """Source directory of a bundled example (``AdapterSourceError`` if there is none)."""
    path = package_root() / "examples" / name
    if "/" in name or name.startswith(".") or not _has_source(path):
        raise AdapterSourceError(f"no example adapter named {name!r}")
    return path


def _has_source(path: Path) -> bool:
    return (path / "adapter.c").is_file() or (path / "adapter.zig").is_file()


def reachable_names(bundle_toml: Path) -> list[str]:
    """The bundle's name and its models' names: what a signing key must be trusted for
    (every name the bundle can be reached by, adapter and V2 model alike)."""
    try:
        doc = tomllib.loads(bundle_toml.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise AdapterSourceError(f"{bundle_toml}: {e}") from e
    models = [m["name"] for m in doc.get("models", []) if isinstance(m, dict) and "name" in m]
    return [str(n) for n in dict.fromkeys([doc.get("name", ""), *models]) if n]


def example_names() -> list[str]:
    """Names of the bundled examples (``adapter.c`` or ``adapter.zig``, and ``bundle.toml``)."""
    root = package_root() / "examples"
    return sorted(
        p.name for p in root.iterdir() if _has_source(p) and (p / "bundle.toml").is_file()
    )


def stage_example(name: str, root: Path, *, cache_dir: Path | None = None) -> Path:
    """Lay out example ``name`` as a directory ``bundle build`` accepts; returns it.

    The module is the prebuilt ``adapter.wasm`` that ships with the example (no compiler
    runs: a gateway has none); only an example without one is compiled (``cache_dir``).
    Idempotent: re-staging replaces the copied files.
    """
    src = example_dir(name)
    dest = root / "examples" / name
    dest.mkdir(parents=True, exist_ok=True)
    prebuilt = src / "adapter.wasm"
    if prebuilt.is_file():
        shutil.copyfile(prebuilt, dest / "adapter.wasm")
    else:
        build_adapter(src, dest / "adapter.wasm", cache_dir=cache_dir)
    shutil.copyfile(src / "bundle.toml", dest / "bundle.toml")
    link = root / "models"
    # Re-point when the package moved (upgrade, another venv): never serve stale models.
    if not (link.is_symlink() and link.readlink() == models_dir()):
        tmp = root / f".models.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(models_dir(), target_is_directory=True)
        tmp.replace(link)  # atomic, so concurrent stagers never see a half-made link
    return dest

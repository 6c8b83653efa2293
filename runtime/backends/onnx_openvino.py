"""OpenVINO's compiled blobs, bound to the signed model like the optimized-graph cache.

The OpenVINO EP compiles a model for its device and, given a `cache_dir`, writes the result
there as ``<hash>.blob`` files it reads back at the next start instead of compiling. Those
files are derivatives of the model: a blob planted or edited in that folder would run in
place of the signed graph. So a profile may not name the folder (the schema refuses
`cache_dir`); the runtime gives the EP a fresh private folder per session, filled only with
blobs this daemon stored for exactly this model (its signed SHA-256), EP, EP version,
options and host, as one `DerivedCache` entry (HMAC-tagged, refused and deleted when edited
or foreign). After the session exists, what the EP wrote is packed back into the entry and
the folder removed: the EP never reads a file the cache did not check a moment before.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import onnxruntime as ort

from wasmgate.runtime.backends import onnx_support as sup
from wasmgate.runtime.backends.base import LoadOptions

if TYPE_CHECKING:
    from wasmgate.signing.derived import DerivedCache

OPENVINO = "OpenVINOExecutionProvider"
Providers = list[tuple[str, dict[str, str]]]
_Blobs = list[tuple[str, bytes]]


def ep_version() -> str:
    """ONNX Runtime's version and the OpenVINO build's (the wheel that brings the EP)."""
    for dist in ("onnxruntime-openvino", "onnxruntime-ep-openvino"):
        try:
            version: str = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return f"{ort.__version__}+{dist}-{version}"
    return str(ort.__version__)


def openvino_devices() -> list[str] | None:
    """Devices the OpenVINO build sees (``['CPU']``), None where ORT cannot tell."""
    try:  # only OpenVINO builds have it (in their public pybind module)
        from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415
    except ImportError:
        return None
    getter = getattr(state, "get_available_openvino_device_ids", None)
    if getter is None:
        return None
    try:
        return list(getter())
    except Exception:
        return None


def check_device(providers: Providers, notes: list[str]) -> None:
    """A note when the profile's OpenVINO device is not one OpenVINO sees here: the EP would
    otherwise take no node and say nothing (ORT runs the model on the CPU EP)."""
    for name, options in providers:
        wanted = options.get("device_type", "")
        devices = openvino_devices() if name == OPENVINO and wanted else None
        if devices is not None and wanted.split("_")[0].split(":")[0] not in devices:
            notes.append(
                f"{OPENVINO}: device {wanted} not available (OpenVINO sees: "
                f"{', '.join(devices) or 'none'})"
            )


@contextmanager
def blob_cache(
    model: tuple[bytes, str | None], options: LoadOptions, providers: Providers, notes: list[str]
) -> Iterator[Providers]:
    """``providers`` with OpenVINO's `cache_dir` pointed at a per-session folder holding the
    verified blobs of this model; what the EP writes is stored when the block succeeds."""
    index = next((i for i, (n, _) in enumerate(providers) if n == OPENVINO), None)
    cache = _cache(options, notes) if index is not None else None
    if index is None or cache is None:
        yield providers
        return
    ep_options = providers[index][1]
    source = sup.model_sha256(model)
    key = blob_key(source, ep_options, options)
    name = f"{key}.ovblobs"
    found = cache.load(name, source, key)
    folder = cache.folder / f".run-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    try:
        before = _unpack(found, folder) if found is not None else []
        chosen = list(providers)
        chosen[index] = (OPENVINO, {**ep_options, "cache_dir": str(folder)})
        yield chosen
        after = _read_blobs(folder)
        if found is not None and after == before:
            notes.append(f"OpenVINO blobs loaded from cache {key[:16]}")
        elif after:
            cache.store(name, source, key, msgspec.msgpack.encode(after))
            notes.append(f"OpenVINO blobs compiled and saved to cache {key[:16]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def blob_key(source: str, ep_options: dict[str, str], options: LoadOptions) -> str:
    """Blobs are device-, build- and option-specific: key by everything that shapes them."""
    host = options.resolved_host()
    what = (
        OPENVINO,
        ep_version(),
        sorted(ep_options.items()),
        host.machine,
        sorted(host.cpu_flags),
    )
    return hashlib.sha256(f"{source}:{what!r}".encode()).hexdigest()


def _cache(options: LoadOptions, notes: list[str]) -> DerivedCache | None:
    if options.cache_dir is None:
        notes.append(f"{OPENVINO}: no cache directory configured; blobs compiled every start")
        return None
    # Imported here, as in onnx.py: only a cache needs wasmgate.signing (PyNaCl).
    from wasmgate.signing.derived import DerivedCache  # noqa: PLC0415
    from wasmgate.signing.errors import SigningError  # noqa: PLC0415

    try:
        return DerivedCache(options.cache_dir / "openvino")
    except SigningError as e:
        notes.append(f"OpenVINO blob cache off: {e}")
        return None


def _unpack(entry: bytes, folder: Path) -> _Blobs:
    blobs = msgspec.msgpack.decode(entry, type=list[tuple[str, bytes]])
    for file_name, data in blobs:
        if "/" in file_name or file_name.startswith("."):  # MAC'd, but a name is never a path
            return []
        (folder / file_name).write_bytes(data)
    return sorted(blobs)


def _read_blobs(folder: Path) -> _Blobs:
    return sorted((p.name, p.read_bytes()) for p in folder.iterdir() if p.is_file())

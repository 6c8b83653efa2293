"""Build a signed ``.wgb`` bundle from a directory holding ``bundle.toml``.

``bundle.toml`` is what an author writes; the builder fills in hashes, sizes, times and
the key id, then signs. Every key except the file paths maps 1:1 to the manifest
(:class:`~wasmgate.signing.manifest.Manifest`); unknown keys are errors::

    name = "digits"                  # [A-Za-z0-9][A-Za-z0-9._-]{0,63}
    version = 3                      # optional if --version is given (which wins)
    description = "8x8 digit classifier"
    min_daemon_version = "0.1.0"     # optional, default "0.0.0"

    [adapter]
    file = "adapter.wasm"            # path relative to DIR (may use ../); stored by basename
    mode = "fresh"                   # fresh | pooled

    [[models]]
    name = "digits"
    format = "onnx"                  # onnx | tflite
    variants = { fp32 = "../../models/digits-fp32.onnx", int8 = "../../models/digits-int8.onnx" }
    inputs = [{ name = "input", datatype = "FP32", shape = [-1, 64] }]
    outputs = [{ name = "probs", datatype = "FP32", shape = [-1, 10] }]
    batching = { max_batch_size = 8, max_queue_delay_us = 500 }

    [routes]                         # both default to name
    http = "digits"
    mqtt = "digits"

    [limits]                         # memory_mb deadline_ms fuel max_input_bytes
    memory_mb = 32                   # max_output_bytes max_in_flight queue_size
    deadline_ms = 1000

    [targets]                        # empty = any device
    profiles = ["rpi5"]
    arch = ["aarch64", "x86_64"]

    [fallback]                       # allowed on_error on_busy on_deadline
    allowed = true                   # on_missing_model on_adapter_request send_payload
    on_adapter_request = true

    [params]                         # str | int | float | bool, read by the guest
    confidence_threshold = 0.6

    [variables.confidence_threshold] # params a site may override (operator variables);
    type = "float"                   # int float bool string enum; numbers need min/max,
    min = 0.3                        # enum needs values = [...]; default = the [params]
    max = 0.95                       # value of that name unless `default` is given

    [state]                          # the adapter's key-value store (absent: none)
    max_bytes = 65536                # keys + values
    max_keys = 1024

    [samples]                        # hard examples kept for retraining (absent: none)
    keep_payload = true              # the payload may be kept and shipped (default false)
    rate = 0.1                       # share of low-confidence requests kept (0..1)
    max_per_hour = 60                # max_bytes = one sample's cap (payload + answers)

    [selftest]
    payload_b64 = "..."
    expect_status = 0

    [release]                        # metric gates of a staged install (all optional)
    min_requests = 200               # the operator's stage request can only tighten them
    max_error_share = 0.01
    max_p99_ratio = 1.5
    window_s = 600

    extra_files = ["samples/one.bin"]  # optional: more files to ship (stored by basename)

Inside the manifest, ``adapter.file`` and ``variants`` name archive members (basenames),
each listed in ``files`` with its sha256 and size. Two different files with the same
basename are refused.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing

from wasmgate._compat import UTC, tomllib
from wasmgate.signing.archive import check_member_name, write_archive
from wasmgate.signing.envelope import BUNDLE_PAYLOAD_TYPE, Envelope, sign, to_json
from wasmgate.signing.errors import ManifestError
from wasmgate.signing.keys import key_id_of
from wasmgate.signing.manifest import Manifest, manifest_from_dict, parse_manifest

DEFAULT_EXPIRY = timedelta(days=90)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_WRITE_BUFFER = 4 * 1024 * 1024


def parse_duration(text: str) -> timedelta:
    """Parse ``90d``, ``12h``, ``30m``, ``2w`` or ``45s`` into a positive timedelta."""
    m = re.fullmatch(r"(\d{1,6})([smhdw])", text.strip())
    if m is None or int(m.group(1)) == 0:
        raise ValueError(f"invalid duration {text!r} (use e.g. 90d, 12h, 2w)")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


def _hash_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(1024 * 1024):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


class _Files:
    """Maps author paths to archive basenames, refusing clashes."""

    def __init__(self, root: Path, label: str) -> None:
        self.root = root
        self.label = label
        self.paths: dict[str, Path] = {}
        self.entries: dict[str, dict[str, Any]] = {}

    def add(self, rel: object) -> str:
        if not isinstance(rel, str) or not rel:
            raise ManifestError(self.label, f"file path must be a non-empty string, got {rel!r}")
        path = (self.root / rel).resolve()
        if not path.is_file():
            raise ManifestError(self.label, f"file {rel!r} not found (looked at {path})")
        name = check_member_name(self.label, path.name)
        if name in ("manifest.json", "manifest.sig"):
            raise ManifestError(self.label, f"file {rel!r}: name {name!r} is reserved")
        known = self.paths.get(name)
        if known is not None and known != path:
            raise ManifestError(self.label, f"two different files named {name!r}: {known}, {path}")
        if known is None:
            sha, size = _hash_file(path)
            self.paths[name] = path
            self.entries[name] = {"sha256": sha, "size": size}
        return name


def _manifest_dict(raw: dict[str, Any], files: _Files, fixed: dict[str, Any]) -> dict[str, Any]:
    data = dict(raw) | fixed
    if isinstance(data.get("adapter"), dict):
        data["adapter"] = dict(data["adapter"])
        data["adapter"]["file"] = files.add(data["adapter"].get("file"))
    models = data.get("models", [])
    if isinstance(models, list):
        data["models"] = [_model_dict(m, files) for m in models]
    for extra in data.pop("extra_files", []):
        files.add(extra)
    data["files"] = files.entries
    return data


def _model_dict(model: object, files: _Files) -> object:
    if not isinstance(model, dict) or not isinstance(model.get("variants"), dict):
        return model
    variants = {k: files.add(v) for k, v in model["variants"].items()}
    return model | {"variants": variants}


def build_bundle(
    src_dir: Path,
    key: nacl.signing.SigningKey,
    out: Path,
    *,
    version: int | None = None,
    expires_in: timedelta = DEFAULT_EXPIRY,
    now: datetime | None = None,
) -> Manifest:
    """Build, sign and write a bundle from ``src_dir/bundle.toml``; returns its manifest."""
    toml_path = src_dir / "bundle.toml"
    try:
        raw = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(str(toml_path), f"cannot read bundle.toml: {e}") from e
    label = str(raw.get("name", src_dir.name))
    version = version if version is not None else raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ManifestError(label, "no integer version in bundle.toml and no --version given")
    issued = (now or datetime.now(UTC)).replace(microsecond=0)
    files = _Files(src_dir, label)
    fixed = {
        "version": version,
        "key_id": key_id_of(key.verify_key),
        "issued_at": issued,
        "expires": issued + expires_in,
    }
    data = _manifest_dict(raw, files, fixed)
    manifest = manifest_from_dict(data, f"{label}@{version}")
    manifest_bytes = to_json(manifest)
    parse_manifest(manifest_bytes, manifest.label())  # what we sign must verify
    sig = sign(key, BUNDLE_PAYLOAD_TYPE, manifest_bytes)
    env = Envelope(payload_type=BUNDLE_PAYLOAD_TYPE, signatures=[sig]).to_json()
    members: list[tuple[str, bytes | Path]] = [("manifest.json", manifest_bytes)]
    members.append(("manifest.sig", env))
    members.extend(files.paths.items())
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        # Few large writes instead of tarfile's 10 KiB records: the page cache then holds
        # the bundle in large folios, which verify maps and hashes ~15% faster.
        with tmp.open("wb", buffering=_WRITE_BUFFER) as f:
            write_archive(f, members)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return manifest

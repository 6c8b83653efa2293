"""Models for the developer commands (``run-guest``, ``adapter test``), loaded like the daemon.

Model files go through ``wasmgate.runtime.backends`` with the device profile ``serve`` would
use (``--profile NAME|PATH``, else detected), so providers, threads, external-data refusal
and quantization behave as on the gateway. A file's precision is whatever it is: it loads as
the ``fp32`` variant, with no precision negotiation and no optimized-graph cache.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from wasmgate.device_profiles import DeviceProfile, ProfileError, detect, load_profile
from wasmgate.runtime.backends import LoadedModel, LoadOptions, ModelSpec, create_backend
from wasmgate.runtime.cli._common import EXIT_USAGE, CliError
from wasmgate.sandbox.models import ModelHandle

__all__ = ["PreloadedModels", "add_profile_option", "load_model", "profile_named"]

# wasi-nn / --nn-preload encoding names -> backend type keys
FORMATS = {"onnx": "onnx", "tensorflowlite": "tflite", "tflite": "tflite"}


def add_profile_option(parser: argparse.ArgumentParser) -> None:
    """``--profile NAME|PATH``: the device profile to load models with (default: detect)."""
    parser.add_argument(
        "--profile",
        default=None,
        metavar="NAME|PATH",
        help="device profile name or TOML path, as serve's `profile` setting "
        "(default: detect this machine's)",
    )


def profile_named(name: str | None) -> DeviceProfile:
    """The named profile (name or TOML path), else the detected one, as ``serve`` does."""
    try:
        return load_profile(name) if name is not None else detect().profile
    except ProfileError as e:
        raise CliError(f"device profile: {e}", EXIT_USAGE) from e


def load_model(data: bytes, encoding: str, name: str, options: LoadOptions) -> LoadedModel:
    """Load model bytes of ``encoding`` (onnx, tensorflowlite/tflite) as the fp32 variant.

    Raises ``BackendError`` (unknown encoding, runtime missing, model refused).
    """
    kind = FORMATS.get(encoding, encoding)
    quiet = _native_stderr_silenced() if kind == "tflite" else contextlib.nullcontext()
    with quiet:
        return create_backend(kind).load(data, ModelSpec(name), options)


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """LiteRT's C++ prints ``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.`` straight
    to file descriptor 2, into the guest's output; no setting turns it off, so the load runs
    with fd 2 on /dev/null. Only in these one-shot commands: the daemon's log keeps it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with Path(os.devnull).open("wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class PreloadedModels:
    """A ``ModelProvider`` for run-guest: named preloads, and any bytes the guest loads."""

    def __init__(self, named: Mapping[str, ModelHandle], options: LoadOptions) -> None:
        """Serve ``named`` to ``load_by_name``; load other bytes with ``options``."""
        self._named = dict(named)
        self._options = options

    def by_name(self, name: str) -> ModelHandle | None:
        """The preloaded model ``name``, if any."""
        return self._named.get(name)

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        """Load the bytes (the developer's own guest is trusted) on the profile's providers."""
        del target  # the device profile picks the providers, as in the daemon
        return load_model(data, encoding, "model", self._options)

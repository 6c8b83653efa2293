"""wasmgate: a WebAssembly-sandboxed edge inference runtime.

The import root. Subpackages map to the repository's top-level folders:
``wasmgate.runtime`` (the daemon and CLI), ``wasmgate.sandbox`` (wasmtime host),
``wasmgate.signing`` (bundles and trust), ``wasmgate.device_profiles`` and
``wasmgate.guest_adapters`` (guest SDK data).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wasmgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]

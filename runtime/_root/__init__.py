"""wasmgate: a WebAssembly-sandboxed edge inference runtime.

The import root. Subpackages map to the repository's top-level folders:
``wasmgate.runtime`` (the daemon and CLI), ``wasmgate.sandbox`` (wasmtime host),
``wasmgate.signing`` (bundles and trust), ``wasmgate.device_profiles`` and
``wasmgate.guest_adapters`` (guest SDK data).
"""

# The one place the version is written: pyproject.toml reads it from here (setuptools'
# dynamic ``attr``). Asking importlib.metadata instead cost every daemon start its import
# (zipfile, email, csv: ~25 ms) and a scan of the installed distributions.
__version__ = "0.1.0"

__all__ = ["__version__"]

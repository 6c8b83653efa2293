"""wasmgate: a WebAssembly-sandboxed edge inference runtime.

The import root. Subpackages map to the repository's top-level folders:
``wasmgate.runtime`` (the daemon and CLI), ``wasmgate.sandbox`` (wasmtime host),
``wasmgate.signing`` (bundles and trust), ``wasmgate.device_profiles`` and
``wasmgate.guest_adapters`` (guest SDK data).
"""

import re

# The version and the commit come from git when the package is built (setuptools-scm writes
# _version.py: pyproject.toml [tool.setuptools_scm]). A module rather than importlib.metadata:
# asking that cost every daemon start its import (zipfile, email, csv: ~25 ms) and a scan of
# the installed distributions.


def _built() -> tuple[str, str | None]:
    try:
        from wasmgate._version import __commit__, __version__  # noqa: PLC0415
    except ImportError:  # an editable install older than the version file: reinstall it
        return "0.1.0", None  # what a tree without git metadata builds as (pyproject.toml)
    return __version__, __commit__


__version__, __commit__ = _built()

__all__ = ["__commit__", "__version__", "describe"]


def describe() -> str:
    """What ``wasmgate --version`` prints: the version and the commit it was built from
    (setuptools-scm's node: ``g`` and the abbreviated hash; ``.dYYYYMMDD`` at the end of the
    version says the tree had uncommitted changes)."""
    if not __commit__:
        return f"wasmgate {__version__} (commit unknown: built without git metadata)"
    dirty = ", with uncommitted changes" if re.search(r"\.d\d{8}$", __version__) else ""
    return f"wasmgate {__version__} (commit {__commit__.removeprefix('g')}{dirty})"

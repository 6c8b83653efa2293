"""Every use of aiohttp's private state, fenced in one module.

Importing aiohttp builds two client TLS contexts, ``aiohttp.connector._SSL_CONTEXT_VERIFIED``
and ``_SSL_CONTEXT_UNVERIFIED``, and each loads the system's CA file: ~140 certificates
parsed at every start, measured at ~80 ms of CPU and 2 MB (both contexts, 2-core VM) before
the daemon can serve anything. The daemon is a server: its one aiohttp client, the cloud
fallback, always builds a context of its own (`wasmgate.runtime.cloud.client`), so those
two are never used.

`import_lean` imports aiohttp with the system CA loading skipped while aiohttp's own module
code runs (``SSLContext.set_default_verify_paths`` is a no-op for that import only), then
checks the result: the verified default holds no trusted root, so anything that still
relied on it fails verification (closed) instead of connecting unverified, and every
context made afterwards loads the system store as usual. It runs once, in ``wasmgate
serve`` before anything else imports aiohttp; when aiohttp is already imported it does
nothing. With an aiohttp whose private names differ, nothing is saved and nothing breaks:
`import_lean` says so (False) and the daemon goes on.
"""

from __future__ import annotations

import importlib
import ssl
import sys

__all__ = ["import_lean"]

_DEFAULTS = ("_SSL_CONTEXT_VERIFIED", "_SSL_CONTEXT_UNVERIFIED")


def import_lean() -> bool:
    """Import aiohttp without its default contexts' CA loading; whether that was so (False:
    aiohttp was imported already, or keeps no import-time contexts where we know them)."""
    if "aiohttp" in sys.modules:
        return False
    cls = ssl.SSLContext
    own = cls.__dict__.get("set_default_verify_paths")  # inherited from _ssl: normally None
    cls.set_default_verify_paths = _skip  # type: ignore[method-assign]
    try:
        connector = importlib.import_module("aiohttp.connector")
    finally:
        if own is None:
            del cls.set_default_verify_paths
        else:
            cls.set_default_verify_paths = own  # type: ignore[method-assign]
    return all(isinstance(getattr(connector, name, None), ssl.SSLContext) for name in _DEFAULTS)


def _skip(self: ssl.SSLContext) -> None:
    """``set_default_verify_paths`` while aiohttp's module code runs: loads nothing."""

"""Optional parts of the install (``pip install 'wasmgate[EXTRA]'``) and the one-line error
a command gives when the part it needs is missing.

The core (``pip install wasmgate``) is the daemon and the operators' tools; adapter authoring
(Zig's compiler, the INT4 quantizer's onnx-ir) is the ``sdk`` extra, 457 MB a gateway never
runs. A command that needs it calls `require` first, so the operator reads which extra to
install instead of a traceback, and the command line exits 2 (a usage problem: this install
cannot do that).
"""

from __future__ import annotations

import importlib

__all__ = ["SDK", "MissingExtra", "require"]

SDK = "sdk"


class MissingExtra(ImportError):
    """A command needs an extra that is not installed; the message says which, in one line."""

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the {extra!r} extra: pip install 'wasmgate[{extra}]'")
        self.extra = extra


def require(module: str, what: str, extra: str = SDK) -> None:
    """Raise `MissingExtra` naming ``extra`` unless ``module`` imports (``what``: the task)."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(what, extra) from e

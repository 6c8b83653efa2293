"""Optional parts of the install (the ``[EXTRA]`` of a pip install) and the one-line error a
command gives when the part it needs is missing.

The core (a wheel or checkout installed without extras, or the Debian package) is the daemon
and the operators' tools; adapter authoring
(Zig's compiler, the INT4 quantizer's onnx-ir) is the ``sdk`` extra, 457 MB a gateway never
runs. A command that needs it calls `require` first, so the operator reads which extra to
install instead of a traceback, and the command line exits 2 (a usage problem: this install
cannot do that).

The error names the command that works where it is printed: wasmgate is on no package index,
so asking pip for the name with the extra fails ("No matching distribution"). It is this
interpreter's pip with the checkout this install came from (pip records it, PEP 610), or,
for the Debian package (no pip, no SDK), an environment of its own.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import shlex
import sys
from urllib.parse import unquote, urlparse

__all__ = ["SDK", "MissingExtra", "require"]

SDK = "sdk"


class MissingExtra(ImportError):
    """A command needs an extra that is not installed; the message says which, in one line."""

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the {extra!r} extra: {install_hint(extra)}")
        self.extra = extra


# The Debian package's environment (deploy/debtree.py PREFIX).
_PACKAGED = "/opt/wasmgate/"


def install_hint(extra: str) -> str:
    """The command that adds ``extra`` to this install, as one line."""
    if sys.prefix.rstrip("/") + "/" == _PACKAGED:
        return (
            "the Debian package carries no SDK: author adapters in a virtual environment "
            f"from a wasmgate checkout (sh deploy/quickstart.sh, then "
            f"~/.local/share/wasmgate-venv/bin/pip install '.[{extra}]')"
        )
    source = _source_dir()
    python = shlex.quote(sys.executable)
    if source is None:
        return f"{python} -m pip install 'CHECKOUT[{extra}]' (CHECKOUT: a wasmgate checkout)"
    return f"{python} -m pip install {shlex.quote(f'{source}[{extra}]')}"


def _source_dir() -> str | None:
    """The checkout this install was made from (pip's direct_url.json), if pip knows it.
    Every distribution of the name is asked: run from a checkout, its egg-info (no record)
    comes first on sys.path."""
    for dist in importlib.metadata.distributions(name="wasmgate"):
        try:
            url = urlparse(json.loads(dist.read_text("direct_url.json") or "{}").get("url", ""))
        except (ValueError, AttributeError):
            continue
        if url.scheme == "file" and not url.path.endswith(".whl"):
            return unquote(url.path)
    return None


def require(module: str, what: str, extra: str = SDK) -> None:
    """Raise `MissingExtra` naming ``extra`` unless ``module`` imports (``what``: the task)."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(what, extra) from e

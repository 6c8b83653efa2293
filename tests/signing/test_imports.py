"""``wasmgate.signing`` imports only PyNaCl, msgspec and the standard library."""

from __future__ import annotations

import json
import subprocess
import sys

import wasmgate.signing

# PyNaCl (nacl, its _sodium extension) and msgspec, which imports typing_extensions when it
# is installed (optional: msgspec has no dependencies of its own).
# On 3.10 tomli is the standard library's tomllib (wasmgate._compat).
ALLOWED_THIRD_PARTY = {"nacl", "_sodium", "msgspec", "typing_extensions", "tomli"}
# The shared document base (Struct base, strict convert, error wording): itself stdlib + msgspec;
# and 3.11's standard library names (wasmgate._compat).
# _version: the constants setuptools-scm writes at build time, read by the import root.
ALLOWED_WASMGATE = {"wasmgate.typed", "wasmgate._compat", "wasmgate._version"}


def test_signing_imports_only_allowed_packages() -> None:
    code = (
        "import sys, json; before = set(sys.modules); import wasmgate.signing; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    loaded = {name.split(".")[0] for name in json.loads(out.stdout)}
    stdlib = {n for n in loaded if n in sys.stdlib_module_names or n.startswith("_sysconfigdata")}
    third_party = loaded - stdlib - {"wasmgate", "_cffi_backend"}
    assert third_party <= ALLOWED_THIRD_PARTY, third_party
    wasmgate_mods = {n for n in json.loads(out.stdout) if n.startswith("wasmgate.")}
    others = {n for n in wasmgate_mods if not n.startswith("wasmgate.signing")}
    assert others <= ALLOWED_WASMGATE, others


def test_public_names_are_exported() -> None:
    for name in wasmgate.signing.__all__:
        assert hasattr(wasmgate.signing, name), name

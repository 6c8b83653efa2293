"""No doc or hint installs wasmgate from a package index: it is on none, so `pip install
wasmgate` (or `'wasmgate[sdk]'`) fails with "No matching distribution found" unless wasmgate
is already there. What works is named instead: the quickstart's venv, the checkout or a
wheel built from it, the Debian package (tests/test_extras.py runs the extra's hint)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# pip install [options] wasmgate / 'wasmgate[...]' / "wasmgate==..." as a requirement.
FROM_INDEX = re.compile(r"pip3? install (?:-\S+ )*['\"]?wasmgate(?:\[|['\"\s=<>~]|$)", re.MULTILINE)
PLACES = ("README.md", "docs", "guest_adapters", "runtime", "signing", "sandbox", "deploy")


def _texts() -> list[Path]:
    found = []
    for place in PLACES:
        path = REPO / place
        files = [path] if path.is_file() else [*path.rglob("*.md"), *path.rglob("*.py")]
        found += [f for f in files if "__pycache__" not in f.parts]
    return found


def test_no_doc_or_hint_installs_wasmgate_from_an_index() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)}"
        for path in _texts()
        for text in [path.read_text(encoding="utf-8", errors="replace")]
        for m in FROM_INDEX.finditer(text)
    ]
    assert not offenders, offenders


def test_the_pattern_catches_the_lines_it_is_for() -> None:
    for line in (
        "pip install wasmgate",
        "pip install 'wasmgate[sdk]'",
        "/opt/wasmgate/bin/pip install wasmgate",
        "pip install -q wasmgate 'tritonclient[http]'",
    ):
        assert FROM_INDEX.search(line), line
    for line in ("pip install .", "pip install '.[sdk]'", "pip install dist/wasmgate-1-py3.whl"):
        assert not FROM_INDEX.search(line), line

"""The user docs stand alone: every relative link resolves inside the repository, and none
points at the design notes outside it (a clone or a wheel has no ``shared/``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    REPO / "README.md",
    REPO / "guest_adapters" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
]
# Written for users first; docs/architecture.md is the contributors' (its own owner).
STANDALONE = [REPO / "README.md", REPO / "guest_adapters" / "README.md"] + [
    REPO / "docs" / n
    for n in (
        "operator.md",
        "mqtt-topics.md",
        "mqtt.md",
        "deploy.md",
        "http.md",
        "fleet.md",
        "grpc.md",
    )
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


@pytest.mark.parametrize("doc", STANDALONE, ids=lambda p: str(p.relative_to(REPO)))
def test_no_pointer_outside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert "shared/" not in text, f"{doc.name} points at shared/, which a clone does not have"
    assert "../shared" not in text


def test_readme_names_the_operator_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in (
        "docs/operator.md",
        "docs/mqtt-topics.md",
        "docs/fleet.md",
        "docs/architecture.md",
        "wasmgate doctor",
    ):
        assert name in readme

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
        "shared-memory.md",
        "benchmarks.md",
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
        "docs/benchmarks.md",
        "wasmgate doctor",
    ):
        assert name in readme


def test_readme_is_a_users_document() -> None:
    """The README stays short: the benchmark history lives in git, the latest run in
    docs/benchmarks.md; the doc links are a list, not a paragraph."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    headings = [ln.lower() for ln in readme.splitlines() if ln.startswith("#")]
    assert not [h for h in headings if "round" in h], "benchmark history belongs in git"
    links = [ln for ln in readme.splitlines() if ln.startswith("- [`docs/")]
    assert len(links) >= 8, "the docs are listed one per line"

"""Bundle tests share one signing kit per test (`tests.runtime.bundlekit.BundleKit`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.bundlekit import BundleKit


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")

"""`model_info` is cached per request path; every change of the serving table shows through."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import open_stack
from wasmgate.runtime.errors import NotFound


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


async def test_staging_promoting_aborting_and_removing_all_show_through(
    tmp_path: Path, kit: BundleKit
) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        svc = st.service
        assert svc.model_info("double").version == 1  # cached from here on
        assert svc.model_info("probe").version == 1
        with pytest.raises(NotFound):
            svc.model_info("double", "2")
        await st.install(kit.build("probe", 2), percent=50)  # staged
        assert svc.model_info("double", "2").version == 2
        assert svc.model_info("double").version == 1  # still serving v1
        await st.registry.abort("probe")
        with pytest.raises(NotFound):
            svc.model_info("double", "2")  # the cached v2 answer went with the candidate
        await st.install(kit.build("probe", 3), percent=50)
        await st.registry.promote("probe")
        assert svc.model_info("double").version == 3
        assert svc.model_info("probe").version == 3
        await st.registry.remove("probe")
        for name in ("double", "probe"):
            with pytest.raises(NotFound):
                svc.model_info(name)

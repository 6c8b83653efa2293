"""The model repository extension over a real in-process stack (registry, serving table,
service): index states, unload and load, staged versions, removal, the token, parameters.
The transports' side (tritonclient over HTTP and gRPC) is tests/runtime/test_triton_dropin.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import open_stack
from wasmgate.runtime.dataplane.repository import IndexEntry, Repository, check_bearer
from wasmgate.runtime.errors import BadRequest, Forbidden, NotFound, NotReady, Unauthorized
from wasmgate.runtime.served.api import AdapterRequest, ModelRequest

X = {"x": np.ones((1, 4), np.float32)}


@pytest.fixture
def kit(tmp_path: Path) -> BundleKit:
    return BundleKit(tmp_path / "kit")


async def test_unload_stops_a_name_and_load_serves_it_again(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        repo = Repository(st.registry.table, lambda: "t")
        ready = [IndexEntry("double", "1", "READY"), IndexEntry("probe", "1", "READY")]
        assert repo.index() == ready
        repo.unload("double", {"unload_dependents": False})
        assert not st.service.model_info("double").ready
        with pytest.raises(NotReady, match=r"^Request for unknown model: 'double' has no avail"):
            await st.service.infer_model(ModelRequest("double", X))
        with pytest.raises(NotReady, match=r"'double' version 1 is not at ready state \(unl"):
            await st.service.infer_model(ModelRequest("double", X, version="1"))
        reason = "unloaded through the model repository API"
        assert repo.index() == [IndexEntry("double", "1", "UNAVAILABLE", reason), ready[1]]
        assert repo.index(ready_only=True) == [ready[1]]
        answer = await st.service.run_adapter(AdapterRequest("probe", b"Px"))  # not the model
        assert answer.source == "local"
        repo.load("double", {})
        repo.load("double", {})  # served already: nothing changes
        assert repo.index() == ready
        assert (await st.service.infer_model(ModelRequest("double", X))).outputs["y"].sum() == 8


async def test_an_unloaded_adapter_and_staged_versions(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        repo = Repository(st.registry.table, lambda: "t")
        await st.install(kit.build("probe", 2), percent=30)
        assert repo.index() == [
            IndexEntry("double", "1", "READY"),
            IndexEntry("double", "2", "READY", "staged for 30 % of requests"),
            IndexEntry("probe", "1", "READY"),
            IndexEntry("probe", "2", "READY", "staged for 30 % of requests"),
        ]
        repo.unload("probe", {})
        for version in (None, "2"):  # every version of the name, staged included
            with pytest.raises(NotReady, match=r"^Request for unknown model: 'probe' "):
                await st.service.run_adapter(AdapterRequest("probe", b"Px", version=version))
        assert [e.state for e in repo.index() if e.name == "probe"] == ["UNAVAILABLE"] * 2


async def test_removal_forgets_an_unload(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        repo = Repository(st.registry.table, lambda: "t")
        repo.unload("double", {})
        await st.registry.remove("probe")
        with pytest.raises(NotFound, match=r"^Request for unknown model: 'double' is not found"):
            repo.load("double", {})
        await st.install(kit.build("probe", 2))
        assert st.service.model_info("double").ready  # a new install serves its names


async def test_refusals(tmp_path: Path, kit: BundleKit) -> None:
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        repo = Repository(st.registry.table, lambda: "t")
        with pytest.raises(NotFound, match=r"^Request for unknown model: 'ghost' is not found"):
            repo.unload("ghost", {})
        with pytest.raises(BadRequest, match="signed bundle"):
            repo.load("double", {"config": '{"max_batch_size": 64}'})
        with pytest.raises(BadRequest, match=r"\['file:1/model.onnx'\]"):
            repo.unload("double", {"file:1/model.onnx": b"x"})
        assert repo.index() == [
            IndexEntry("double", "1", "READY"),
            IndexEntry("probe", "1", "READY"),
        ]


@pytest.mark.parametrize(
    ("token", "header", "error"),
    [
        (None, "Bearer t", Forbidden),
        ("", "Bearer ", Forbidden),
        ("t", None, Unauthorized),
        ("t", "Bearer u", Unauthorized),
        ("t", "Basic t", Unauthorized),
        ("t", "Bearer t t", Unauthorized),
        ("t", "t", Unauthorized),
    ],
)
def test_the_token_check(token: str | None, header: str | None, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_bearer(token, header, "peer")


def test_the_token_check_passes() -> None:
    check_bearer("t", "Bearer t", None)
    check_bearer("t", "bearer  t ", None)  # scheme case-insensitive, spaces around the token

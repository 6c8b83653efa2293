"""``fleet rollout`` resolves REF in a real registry: the tag's digest, name and version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from wasmgate.runtime.cli import main
from wasmgate.runtime.cli._common import CliError
from wasmgate.runtime.cli.fleet import resolve_bundle


def test_a_tag_resolves_to_its_pinned_digest(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = BundleKit(tmp_path / "kit").build("probe", 7)
    tag = f"{registry.address}/wasmgate/probe:stable"
    assert main(["bundle", "push", str(bundle), tag, "--insecure"]) == 0
    pinned = next(
        ln.split()[1] for ln in capsys.readouterr().out.splitlines() if ln.startswith("ref ")
    )
    wanted = resolve_bundle(tag, insecure=True)
    assert (wanted.name, wanted.version, wanted.ref) == ("probe", 7, pinned)
    assert resolve_bundle(pinned, insecure=True) == wanted  # a digest resolves to itself


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("{reg}/wasmgate/probe:missing", "resolve"),
        ("{reg}/Upper/Case:1", "lower case"),
        ("no-registry-here", "HOST"),
    ],
)
def test_refs_that_do_not_resolve_refuse_the_start(
    registry: Registry, ref: str, message: str
) -> None:
    with pytest.raises(CliError, match=message) as err:
        resolve_bundle(ref.format(reg=registry.address), insecure=True)
    assert err.value.exit_code == 2

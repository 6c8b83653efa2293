"""A staged candidate is re-verified like the serving version: a trust reload that revokes
the candidate's signer aborts the candidate (durably), and so does a start-up with a trust
store that no longer accepts it; the serving version is untouched either way."""

from __future__ import annotations

from pathlib import Path

from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import open_stack
from wasmgate.runtime.served.api import AdapterRequest
from wasmgate.signing.keys import key_id_of


def _two_signers(tmp_path: Path, kit: BundleKit) -> BundleKit:
    """A second kit whose key ``kit`` also trusts (the candidate's signer)."""
    other = BundleKit(tmp_path / "other")
    kit.trust = kit.trust.with_signer(other.key.verify_key, ["*"], {})
    return other


async def test_trust_reload_aborts_a_revoked_candidate(tmp_path: Path, kit: BundleKit) -> None:
    other = _two_signers(tmp_path, kit)
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        await st.install(other.build("probe", 2), percent=50)
        revoked = kit.trust.with_revoked(key_id=key_id_of(other.key.verify_key))
        assert await st.registry.apply_trust(revoked) == []  # nothing unloaded
        [entry] = st.registry.status()
        assert (entry["version"], "staged" in entry) == (1, False)
        assert st.store.candidates() == []
        answer = await st.service.run_adapter(AdapterRequest("probe", b"P", key="k"))
        assert answer.version == 1
        assert "no longer accepted" in st.registry.events[-1].message


async def test_start_up_aborts_a_candidate_no_longer_trusted(
    tmp_path: Path, kit: BundleKit
) -> None:
    other = _two_signers(tmp_path, kit)
    async with open_stack(tmp_path, kit, start=(kit.build("probe", 1),)) as st:
        await st.install(other.build("probe", 2), percent=50)
    kit.trust = kit.trust.with_revoked(key_id=key_id_of(other.key.verify_key))
    async with open_stack(tmp_path, kit, state_dir=tmp_path / "state") as st:
        [entry] = st.registry.status()
        assert (entry["version"], "staged" in entry) == (1, False)
        assert st.store.candidates() == []
        assert "not accepted at start-up" in st.registry.events[-1].message

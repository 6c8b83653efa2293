"""Whether a bundle may serve on this gateway: its targets before loading, its selftest after.

The targets (``min_daemon_version``, ``[targets]`` profiles and arch) are checked before
anything is compiled or loaded; the selftest runs the loaded adapter once on the signed
sample payload, against a scratch state. Either failing is a `BundleRejected` naming the
bundle; the loader (`loader.py`) then closes what it had loaded.
"""

from __future__ import annotations

import base64
import logging
import platform
from collections.abc import Mapping

from wasmgate import __version__
from wasmgate.device_profiles import DeviceProfile
from wasmgate.runtime.bundles.kv import StateDb
from wasmgate.runtime.errors import BundleRejected
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.sandbox import SandboxError
from wasmgate.signing.manifest import Manifest

log = logging.getLogger("wasmgate.loader")

_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}


def check_targets(manifest: Manifest, profile: DeviceProfile) -> None:
    """Refuse a bundle made for a newer daemon, another device profile or another arch."""
    label = manifest.label()
    if _version_tuple(manifest.min_daemon_version) > _version_tuple(__version__):
        raise BundleRejected(
            f"{label}: needs wasmgate >= {manifest.min_daemon_version}, this is {__version__}"
        )
    if manifest.targets.profiles and profile.name not in manifest.targets.profiles:
        wanted = ", ".join(manifest.targets.profiles)
        raise BundleRejected(
            f"{label}: targets profiles [{wanted}], this gateway is {profile.name}"
        )
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    if manifest.targets.arch and arch not in manifest.targets.arch:
        raise BundleRejected(f"{label}: targets arch {manifest.targets.arch}, this is {arch}")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def selftest(bundle: LoadedBundle, manifest: Manifest) -> None:
    """Run the manifest's ``[selftest]`` through the loaded adapter (if both exist)."""
    test = manifest.selftest
    if test is None or bundle.adapter is None:
        return
    payload = base64.b64decode(test.payload_b64)
    meta: Mapping[str, str] = {
        **{f"param.{k}": v for k, v in bundle.params.items()},
        "adapter": bundle.adapter_name or bundle.name,
        "content_type": "",
        "transport": "selftest",
    }
    # A scratch state: the selftest sees a granted store like a request does, but never
    # reads or changes the keys the adapter keeps for real.
    grant = manifest.state
    try:
        with StateDb(None) as scratch:
            state = (
                scratch.tenant(manifest.name, grant.max_bytes, grant.max_keys) if grant else None
            )
            limits = bundle.guest_limits(None)
            result = bundle.adapter.run(payload, meta, bundle.provider, limits, state=state)
    except SandboxError as e:
        raise BundleRejected(f"{manifest.label()}: selftest failed: {e}") from e
    if result.status != test.expect_status:
        said = result.output[:200].decode("utf-8", errors="replace")
        raise BundleRejected(
            f"{manifest.label()}: selftest returned status {result.status}, "
            f"expected {test.expect_status}: {said}"
        )
    log.info("selftest passed", extra={"bundle": manifest.label()})

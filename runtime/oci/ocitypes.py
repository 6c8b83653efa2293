"""What a registry reference and a bundle artifact are, and what can go wrong fetching one
(no I/O, no oras: ``oci.py`` does the talking).

A bundle artifact is an OCI image manifest with ``artifactType`` :data:`ARTIFACT_TYPE` and
exactly one layer, the ``.wgb`` bytes (media type :data:`LAYER_MEDIA_TYPE`);
:func:`parse_manifest` accepts that and nothing else.

A reference is ``HOST[:PORT]/REPO:TAG`` or ``HOST[:PORT]/REPO@sha256:<64 hex>``: the host is
always explicit (no implied Docker Hub), so a fleet document never means two registries.
Errors say whether trying again later can help (:attr:`RegistryError.retryable`): fleetd
reports ``pending`` and retries a retryable one, ``failed`` otherwise.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

from wasmgate.runtime.errors import DaemonError

ARTIFACT_TYPE = "application/vnd.wasmgate.bundle.v1+tar"
LAYER_MEDIA_TYPE = ARTIFACT_TYPE
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"

TITLE = "org.opencontainers.image.title"
BUNDLE_NAME = "dev.wasmgate.bundle.name"
BUNDLE_VERSION = "dev.wasmgate.bundle.version"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

# distribution's reference grammar (reference/regexp.go), lower-case repository paths
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF = re.compile(
    rf"(?P<host>{_HOST}(?::[0-9]{{1,5}})?)/(?P<repo>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)


class RegistryError(DaemonError):
    """A registry operation failed; ``retryable`` says whether a later try can succeed."""

    retryable = False


class RegistryUnavailable(RegistryError):
    """The registry did not answer (connection, timeout, 5xx, 429): try again later."""

    retryable = True


class RegistryAuthError(RegistryError):
    """The registry refused the credentials, or TLS verification failed."""


class RegistryPlainHttp(RegistryAuthError):
    """TLS was asked of a registry that answered in plain HTTP: configuration
    (``registry.insecure``, ``--insecure``), not an outage."""


class ArtifactNotFound(RegistryError):
    """No manifest or blob by that reference in the registry."""


class ArtifactRefused(RegistryError):
    """What the registry served is not what was asked for: wrong digest, size over the cap
    or not as declared, not a wasmgate bundle artifact. Never retried: it is refused."""


@dataclass(frozen=True)
class Reference:
    """A parsed registry reference: a tag, a digest, or both (the digest wins)."""

    host: str
    repo: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """Parse ``HOST[:PORT]/REPO(:TAG|@sha256:HEX)``; ValueError says what is wrong."""
        m = _REF.fullmatch(text)
        if m is None:
            raise ValueError(
                f"{text[:200]!r} is not HOST[:PORT]/REPO:TAG or HOST[:PORT]/REPO@sha256:<hex> "
                "(repository names are lower case)"
            )
        if m["tag"] is None and m["digest"] is None:
            raise ValueError(f"{text[:200]!r}: give a :TAG or an @sha256: digest")
        return cls(m["host"], m["repo"], m["tag"], m["digest"])

    def pinned(self, digest: str) -> Reference:
        """The same repository by digest (what a fleet document carries)."""
        return Reference(self.host, self.repo, None, digest)

    def __str__(self) -> str:
        tail = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{self.host}/{self.repo}{tail}"


@dataclass(frozen=True)
class Artifact:
    """A bundle manifest read from a registry and checked: its digest and its one layer."""

    digest: str
    manifest: bytes
    layer_digest: str
    layer_size: int
    annotations: dict[str, str]


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def parse_manifest(body: bytes, digest: str, label: str, max_layer_bytes: int) -> Artifact:
    """Check a manifest is a wasmgate bundle artifact with one layer within the cap."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the stack
        raise ArtifactRefused(f"{label}: manifest is not JSON: {str(e)[:200]}") from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise ArtifactRefused(f"{label}: not an OCI image manifest (schemaVersion 2)")
    kind = doc.get("artifactType")
    layers = doc.get("layers")
    if kind not in (None, ARTIFACT_TYPE) or not isinstance(layers, list) or len(layers) != 1:
        raise ArtifactRefused(f"{label}: not a wasmgate bundle (artifactType {str(kind)[:80]!r})")
    layer = layers[0]
    if not isinstance(layer, dict) or layer.get("mediaType") != LAYER_MEDIA_TYPE:
        got = layer.get("mediaType") if isinstance(layer, dict) else None
        raise ArtifactRefused(
            f"{label}: layer media type {str(got)[:80]!r}, want {LAYER_MEDIA_TYPE}"
        )
    ldigest, size = layer.get("digest"), layer.get("size")
    if not isinstance(ldigest, str) or not _DIGEST.fullmatch(ldigest):
        raise ArtifactRefused(f"{label}: layer digest {str(ldigest)[:80]!r} is not sha256")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ArtifactRefused(f"{label}: layer size {str(size)[:80]} is not a byte count")
    if size > max_layer_bytes:
        raise ArtifactRefused(f"{label}: layer is {size} bytes, cap is {max_layer_bytes}")
    notes = doc.get("annotations")
    kept = {k: v for k, v in notes.items() if isinstance(v, str)} if isinstance(notes, dict) else {}
    return Artifact(digest, body, ldigest, size, kept)


def retry_delay(backoff_s: float, backoff_max_s: float, attempt: int) -> float:
    """Seconds before retry ``attempt`` (0 = the first retry) of a registry call: doubling
    from ``registry.backoff_s`` up to ``registry.backoff_max_s``, jittered so that gateways
    do not retry in step. The one formula of the fleet pull and the samples sink."""
    base = min(backoff_max_s, backoff_s * 2.0 ** min(attempt, 32))
    return base * random.uniform(0.5, 1.0)

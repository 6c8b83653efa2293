"""What a registry reference is and what can go wrong fetching one (no I/O, no oras).

A reference is ``HOST[:PORT]/REPO:TAG`` or ``HOST[:PORT]/REPO@sha256:<64 hex>``: the host is
always explicit (no implied Docker Hub), so a fleet document never means two registries.
Errors say whether trying again later can help (:attr:`RegistryError.retryable`): fleetd
reports ``pending`` and retries a retryable one, ``failed`` otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wasmgate.runtime.errors import DaemonError

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

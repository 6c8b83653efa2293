"""How requests reach a registry and how its answers become our errors.

``oras`` drives the session; this module gives it what it lacks: a timeout on every
request (`Timeouts`), Basic credentials where a registry challenges with Basic
(`ChallengeAuth`), the mapping of HTTP statuses and transport failures to the
`RegistryError` kinds the CLI and the fleet pull act on (`check`, `transport_error`,
`wants_credentials`), and reads of a registry's bodies that stop at a cap
(`read_capped`, `copy_capped`): nothing a registry sends is trusted.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

import oras.auth
import requests
import requests.adapters

from wasmgate.runtime.oci.ocitypes import (
    ArtifactNotFound,
    ArtifactRefused,
    RegistryAuthError,
    RegistryError,
    RegistryPlainHttp,
    RegistryUnavailable,
)

_CHUNK = 256 * 1024


class Timeouts(requests.adapters.HTTPAdapter):
    """Gives every request of the session (oras passes none) a connect/read timeout."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self._timeout_s = timeout_s

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout_s
        return super().send(request, *args, **kwargs)


class ChallengeAuth(oras.auth.TokenAuth):  # type: ignore[misc]
    """Bearer tokens (Harbor, cloud registries) or, when a registry challenges with Basic
    (distribution's or zot's htpasswd), Basic credentials on every later request."""

    def __init__(self) -> None:
        super().__init__()
        self._basic_only = False

    def get_auth_header(self) -> dict[str, str]:
        if self._basic_only:
            return {"Authorization": f"Basic {self._basic_auth}"}
        return dict(super().get_auth_header())

    def authenticate_request(
        self, original: requests.Response, headers: dict[str, str], refresh: bool = False
    ) -> tuple[dict[str, str], bool]:
        challenge = original.headers.get("Www-Authenticate", "")
        if challenge.lower().startswith("basic"):
            if self._basic_only:  # sent with this very request, and refused
                raise RegistryAuthError(
                    f"{original.url}: HTTP {original.status_code}: the registry refused "
                    "registry.username/password"
                )
            if not getattr(self, "_basic_auth", None):
                return headers, False  # no credentials for this host
            self._basic_only = True
            self.token = ""  # not None: oras then sends get_auth_header() on every request
            return {**(headers or {}), **self.get_auth_header()}, True
        result: tuple[dict[str, str], bool] = super().authenticate_request(
            original, headers, refresh
        )
        return result


def check(r: requests.Response, what: str) -> None:
    """Raise the `RegistryError` kind an answer other than a success means."""
    code = r.status_code
    if code in (200, 201, 202, 204):
        return
    detail = f"{what}: HTTP {code} {r.reason}"
    if code == 404:
        raise ArtifactNotFound(detail)
    if code in (401, 403):
        raise RegistryAuthError(f"{detail}: the registry refused registry.username/password")
    if code == 429 or code >= 500:
        raise RegistryUnavailable(detail)
    raise RegistryError(f"{detail}: {r.text[:200]}")


# What OpenSSL says when the "server hello" it reads is an HTTP answer (1.1/3.0, then 3.2+)
_PLAIN_HTTP_SIGNS = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure")


def transport_error(what: str, e: Exception) -> RegistryError:
    """A failed TLS handshake is configuration (registry.ca, or a plain-HTTP registry that
    wants registry.insecure), not a registry outage."""
    if isinstance(e, requests.exceptions.SSLError):
        if any(sign in str(e) for sign in _PLAIN_HTTP_SIGNS):
            return RegistryPlainHttp(
                f"{what}: the registry seems to speak plain HTTP, not HTTPS: for a lab "
                "registry give --insecure (config: registry.insecure = true)"
            )
        return RegistryAuthError(f"{what}: TLS verification failed (registry.ca?): {e}")
    return RegistryUnavailable(f"{what}: {e}")


def wants_credentials(what: str, e: ValueError) -> RegistryAuthError:
    """oras's "cannot respond to request for authentication": credentials are missing."""
    return RegistryAuthError(
        f"{what}: the registry wants credentials we do not have or may not send ({e}); "
        "set registry.username/password (and registry.host to this registry)"
    )


def copy_capped(
    r: requests.Response,
    cap: int,
    sink: BinaryIO,
    stop: threading.Event | None,
    on_bytes: Callable[[int], None] | None,
) -> tuple[int, str]:
    """Copy the body into ``sink`` while hashing; stop one chunk past ``cap`` (then the
    length check fails) or when ``stop`` is set. Returns (bytes, sha256 digest)."""
    hasher, got = hashlib.sha256(), 0
    for chunk in r.iter_content(_CHUNK):
        if stop is not None and stop.is_set():
            raise RegistryUnavailable("download cancelled")
        got += len(chunk)
        if on_bytes is not None:
            on_bytes(len(chunk))
        if got > cap:
            break
        hasher.update(chunk)
        sink.write(chunk)
    return got, "sha256:" + hasher.hexdigest()


def read_capped(r: requests.Response, cap: int, what: str) -> bytes:
    """The whole body (a manifest); refused once it grows past ``cap``."""
    out = bytearray()
    for chunk in r.iter_content(_CHUNK):
        out += chunk
        if len(out) > cap:
            raise ArtifactRefused(f"{what}: manifest larger than {cap} bytes")
    return bytes(out)

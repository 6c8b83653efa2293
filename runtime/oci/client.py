"""Bundles as OCI artifacts: the one module that talks to a registry (through ``oras``).

A bundle is an OCI image manifest with ``artifactType`` :data:`ARTIFACT_TYPE`, the empty
config descriptor (OCI image-spec 1.1 guidance for artifacts) and exactly one layer: the
``.wgb`` bytes, media type :data:`LAYER_MEDIA_TYPE`, titled with the file name. Manifest
annotations name the bundle and its version so ``oras``/``crane`` users see what it is.

Invariants:
- Nothing read from a registry is trusted: a manifest asked for by digest must hash to it,
  a layer must hash to its descriptor's digest and be exactly its declared size, and the
  declared size is checked against the caller's cap before a byte of the layer is read.
  The registry is only transport; the bundle's signature decides at install.
- One try per call: oras retries every failure itself, sleeping ``2 + 3**n`` s (minutes in
  all, not cancellable); the caller (``pull.py``, the CLI) owns the retry policy. Every
  request has a timeout.
- Credentials go only to the configured registry host (or to any host when none is named).
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import oras.auth
import oras.container
import oras.provider
import requests
import requests.adapters

from wasmgate.runtime.oci.ocitypes import (
    ARTIFACT_TYPE,
    BUNDLE_NAME,
    BUNDLE_VERSION,
    LAYER_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    TITLE,
    Artifact,
    ArtifactNotFound,
    ArtifactRefused,
    Reference,
    RegistryAuthError,
    RegistryError,
    RegistryPlainHttp,
    RegistryUnavailable,
    parse_manifest,
    sha256_digest,
)
from wasmgate.runtime.ops.config import RegistrySettings

EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
    "data": "e30=",
}
# The artifact's format lives in ocitypes (no I/O); callers may import it from here too.
__all__ = [
    "ARTIFACT_TYPE",
    "BUNDLE_NAME",
    "BUNDLE_VERSION",
    "LAYER_MEDIA_TYPE",
    "Artifact",
    "OciClient",
    "parse_manifest",
    "sha256_digest",
]
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # distribution's own limit on a manifest
_CHUNK = 256 * 1024


class _Timeouts(requests.adapters.HTTPAdapter):
    """Gives every request of the session (oras passes none) a connect/read timeout."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self._timeout_s = timeout_s

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout_s
        return super().send(request, *args, **kwargs)


class _ChallengeAuth(oras.auth.TokenAuth):  # type: ignore[misc]
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


class OciClient:
    """A registry client for one host; blocking (callers in the daemon use a thread)."""

    def __init__(self, host: str, access: RegistrySettings) -> None:
        tls: bool | str = str(access.ca) if access.ca is not None else True
        self._reg = oras.provider.Registry(host, insecure=access.insecure, tls_verify=tls)
        # oras's do_request retries (and sleeps) on every failure: this instance, and the
        # oras helpers it calls (upload_blob, ...), use the undecorated one-try function.
        one_try = oras.provider.Registry.do_request.__wrapped__
        self._reg.do_request = functools.partial(one_try, self._reg)
        session = self._reg.session
        for scheme in ("http://", "https://"):
            session.mount(scheme, _Timeouts(access.timeout_s))
        auth = _ChallengeAuth()
        # what oras.auth.get_auth_backend sets up, for a backend class of our own
        auth.session, auth.prefix, auth._tls_verify = session, self._reg.prefix, tls  # noqa: SLF001
        if access.username and (access.host is None or access.host == host):
            auth.set_basic_auth(access.username, access.password or "")
        self._reg.auth = auth
        self._base = f"{self._reg.prefix}://{host}/v2"

    def close(self) -> None:
        self._reg.session.close()

    def _do(self, url: str, method: str = "GET", **kw: Any) -> requests.Response:
        try:
            response: requests.Response = self._reg.do_request(url, method, **kw)
        except (requests.exceptions.RequestException, OSError) as e:
            raise _transport_error(f"{method} {url}", e) from e
        except ValueError as e:  # oras: "Cannot respond to request for authentication."
            raise _wants_credentials(f"{method} {url}", e) from e
        return response

    def ping(self) -> None:
        """``GET /v2/``: raise unless the registry answers and accepts the credentials."""
        url = f"{self._base}/"
        _check(self._do(url), url)

    def resolve(self, ref: Reference, max_layer_bytes: int) -> Artifact:
        """Read and check the manifest ``ref`` names (tag or digest); see the invariants."""
        url = f"{self._base}/{ref.repo}/manifests/{ref.digest or ref.tag}"
        with self._do(url, headers={"Accept": MANIFEST_MEDIA_TYPE}, stream=True) as r:
            _check(r, url)
            body = _read_capped(r, MAX_MANIFEST_BYTES, url)
        digest = sha256_digest(body)
        if ref.digest is not None and digest != ref.digest:
            raise ArtifactRefused(f"{ref}: the manifest served hashes to {digest}")
        return parse_manifest(body, digest, str(ref), max_layer_bytes)

    def download(
        self,
        ref: Reference,
        art: Artifact,
        sink: BinaryIO,
        stop: threading.Event | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        """Stream the layer into ``sink``; raise unless it is exactly the declared bytes."""
        url = f"{self._base}/{ref.repo}/blobs/{art.layer_digest}"
        with self._do(url, stream=True) as r:
            _check(r, url)
            declared = r.headers.get("Content-Length", "")
            if declared.isdigit() and (len(declared) > 20 or int(declared) > art.layer_size):
                raise ArtifactRefused(f"{ref}: layer is {declared[:40]} bytes, manifest says less")
            try:
                got, actual = _copy_capped(r, art.layer_size, sink, stop, on_bytes)
            except requests.exceptions.RequestException as e:
                raise RegistryUnavailable(f"{ref}: layer download broke off: {e}") from e
        if got != art.layer_size or actual != art.layer_digest:
            raise ArtifactRefused(
                f"{ref}: layer is {got} bytes hashing to {actual}, "
                f"manifest says {art.layer_size} bytes {art.layer_digest}"
            )

    def push(self, path: Path, ref: Reference, annotations: dict[str, str]) -> Artifact:
        """Upload ``path`` as the layer, the empty config and the manifest; tag ``ref``."""
        data = path.read_bytes()
        layer = {
            "mediaType": LAYER_MEDIA_TYPE,
            "digest": sha256_digest(data),
            "size": len(data),
            "annotations": {TITLE: path.name},
        }
        container = oras.container.Container(f"{ref.host}/{ref.repo}")
        for blob, desc in ((path, layer), (None, EMPTY_CONFIG)):
            self._upload(blob, desc, container)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": ARTIFACT_TYPE,
            "config": EMPTY_CONFIG,
            "layers": [layer],
            "annotations": {TITLE: path.name, **annotations},
        }
        body = json.dumps(manifest, separators=(",", ":")).encode()
        url = f"{self._base}/{ref.repo}/manifests/{ref.digest or ref.tag}"
        r = self._do(url, "PUT", data=body, headers={"Content-Type": MANIFEST_MEDIA_TYPE})
        _check(r, url)
        return parse_manifest(body, sha256_digest(body), str(ref), len(data))

    def push_bytes(
        self, data: bytes, ref: Reference, kind: str, title: str, annotations: dict[str, str]
    ) -> str:
        """Upload ``data`` as the one layer (media type and ``artifactType`` ``kind``), the
        empty config and the manifest tagged ``ref``; returns the manifest's digest.

        Done only when the registry answered the manifest PUT ``201 Created`` (with our
        digest, when it names one): a caller may delete its copy of ``data`` then."""
        layer_digest = sha256_digest(data)
        layer = {
            "mediaType": kind,
            "digest": layer_digest,
            "size": len(data),
            "annotations": {TITLE: title},
        }
        container = oras.container.Container(f"{ref.host}/{ref.repo}")
        self._upload_bytes(data, layer_digest, container)
        self._upload_bytes(b"{}", str(EMPTY_CONFIG["digest"]), container)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": kind,
            "config": EMPTY_CONFIG,
            "layers": [layer],
            "annotations": {TITLE: title, **annotations},
        }
        body = json.dumps(manifest, separators=(",", ":")).encode()
        digest = sha256_digest(body)
        url = f"{self._base}/{ref.repo}/manifests/{ref.tag}"
        r = self._do(url, "PUT", data=body, headers={"Content-Type": MANIFEST_MEDIA_TYPE})
        _check(r, url)
        stored = r.headers.get("Docker-Content-Digest", digest)
        if r.status_code != 201 or stored != digest:
            # a 200 or a foreign digest is not the registry storing this manifest
            raise RegistryUnavailable(
                f"PUT {url}: HTTP {r.status_code}, digest {stored[:80]!r}: not stored as {digest}"
            )
        return digest

    def _upload_bytes(self, data: bytes, digest: str, container: Any) -> None:
        """One monolithic upload (POST, then PUT with the digest), unless the blob is there."""
        url = f"{self._base}/{container.api_prefix}/blobs/{digest}"
        if self._do(url, "HEAD").status_code == 200:
            return
        start = self._do(f"{self._base}/{container.api_prefix}/blobs/uploads/", "POST")
        _check(start, "blob upload")
        loc = self._reg._get_location(start, container)  # noqa: SLF001 - oras helper
        if not loc:
            raise RegistryUnavailable(f"blob upload: HTTP {start.status_code} without a Location")
        sep = "&" if "?" in loc else "?"
        put = f"{loc}{sep}digest={digest}"
        headers = {"Content-Type": "application/octet-stream"}
        _check(self._do(put, "PUT", data=data, headers=headers), put)

    def _upload(self, blob: Path | None, desc: dict[str, Any], container: Any) -> None:
        if blob is None:  # the 2-byte empty config "{}"
            self._upload_bytes(b"{}", desc["digest"], container)
            return
        try:
            r = self._reg.upload_blob(str(blob), container, desc)
        except (requests.exceptions.RequestException, OSError) as e:
            raise _transport_error(f"upload of {blob.name}", e) from e
        except ValueError as e:
            raise _wants_credentials(f"upload of {blob.name}", e) from e
        _check(r, f"upload of {blob.name}")


def _check(r: requests.Response, what: str) -> None:
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


def _transport_error(what: str, e: Exception) -> RegistryError:
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


def _wants_credentials(what: str, e: ValueError) -> RegistryAuthError:
    return RegistryAuthError(
        f"{what}: the registry wants credentials we do not have or may not send ({e}); "
        "set registry.username/password (and registry.host to this registry)"
    )


def _copy_capped(
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


def _read_capped(r: requests.Response, cap: int, what: str) -> bytes:
    out = bytearray()
    for chunk in r.iter_content(_CHUNK):
        out += chunk
        if len(out) > cap:
            raise ArtifactRefused(f"{what}: manifest larger than {cap} bytes")
    return bytes(out)

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

The session's timeouts, the Basic-or-Bearer authentication, the error mapping and the
capped reads are `transport.py`'s; the artifact's format is `ocitypes.py`'s (no I/O).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import oras.container
import oras.provider
import requests

from wasmgate.runtime.oci.ocitypes import (
    ARTIFACT_TYPE,
    LAYER_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    TITLE,
    Artifact,
    ArtifactRefused,
    Reference,
    RegistryUnavailable,
    parse_manifest,
    sha256_digest,
)
from wasmgate.runtime.oci.transport import (
    ChallengeAuth,
    Timeouts,
    check,
    copy_capped,
    read_capped,
    transport_error,
    wants_credentials,
)
from wasmgate.runtime.ops.config import RegistrySettings

EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
    "data": "e30=",
}
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # distribution's own limit on a manifest


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
            session.mount(scheme, Timeouts(access.timeout_s))
        auth = ChallengeAuth()
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
            raise transport_error(f"{method} {url}", e) from e
        except ValueError as e:  # oras: "Cannot respond to request for authentication."
            raise wants_credentials(f"{method} {url}", e) from e
        return response

    def ping(self) -> None:
        """``GET /v2/``: raise unless the registry answers and accepts the credentials."""
        url = f"{self._base}/"
        check(self._do(url), url)

    def resolve(self, ref: Reference, max_layer_bytes: int) -> Artifact:
        """Read and check the manifest ``ref`` names (tag or digest); see the invariants."""
        url = f"{self._base}/{ref.repo}/manifests/{ref.digest or ref.tag}"
        with self._do(url, headers={"Accept": MANIFEST_MEDIA_TYPE}, stream=True) as r:
            check(r, url)
            body = read_capped(r, MAX_MANIFEST_BYTES, url)
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
            check(r, url)
            declared = r.headers.get("Content-Length", "")
            if declared.isdigit() and (len(declared) > 20 or int(declared) > art.layer_size):
                raise ArtifactRefused(f"{ref}: layer is {declared[:40]} bytes, manifest says less")
            try:
                got, actual = copy_capped(r, art.layer_size, sink, stop, on_bytes)
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
        check(r, url)
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
        check(r, url)
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
        check(start, "blob upload")
        loc = self._reg._get_location(start, container)  # noqa: SLF001 - oras helper
        if not loc:
            raise RegistryUnavailable(f"blob upload: HTTP {start.status_code} without a Location")
        sep = "&" if "?" in loc else "?"
        put = f"{loc}{sep}digest={digest}"
        headers = {"Content-Type": "application/octet-stream"}
        check(self._do(put, "PUT", data=data, headers=headers), put)

    def _upload(self, blob: Path | None, desc: dict[str, Any], container: Any) -> None:
        if blob is None:  # the 2-byte empty config "{}"
            self._upload_bytes(b"{}", desc["digest"], container)
            return
        try:
            r = self._reg.upload_blob(str(blob), container, desc)
        except (requests.exceptions.RequestException, OSError) as e:
            raise transport_error(f"upload of {blob.name}", e) from e
        except ValueError as e:
            raise wants_credentials(f"upload of {blob.name}", e) from e
        check(r, f"upload of {blob.name}")

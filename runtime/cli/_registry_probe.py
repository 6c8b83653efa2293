"""``wasmgate doctor``'s registry checks: ``GET /v2/`` as the daemon's puller (and its
samples sink, ``samples.oci_repository``) would send it.

The same client, credentials, CA and timeout as a fleet pull (``wasmgate.runtime.oci.client``),
so a pass here means the daemon can reach the registry and is accepted by it.
"""

from __future__ import annotations

import ipaddress

from wasmgate.runtime.cli._checks import Finding
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import (
    RegistryAuthError,
    RegistryError,
    RegistryPlainHttp,
    RegistryUnavailable,
)
from wasmgate.runtime.ops.config import RegistrySettings, SamplesSettings

CHECK = "registry"


SAMPLES_CHECK = "samples registry"


def probe_registry(reg: RegistrySettings) -> Finding:
    if reg.host is None:
        return Finding(CHECK, "skip", "not configured (set registry.host to check a registry)")
    return _probe(CHECK, reg.host, reg, "registry.host")


def probe_samples_registry(samples: SamplesSettings, reg: RegistrySettings) -> Finding:
    """The host of ``samples.oci_repository``, as the daemon's samples sink reaches it."""
    if samples.oci_repository is None:
        return Finding(SAMPLES_CHECK, "skip", "not configured (samples.oci_repository)")
    host = samples.oci_repository.split("/", 1)[0]
    found = _probe(SAMPLES_CHECK, host, reg, "samples.oci_repository")
    if found.level == "ok" and reg.username and reg.host not in (None, host):
        fix = f"set registry.host to {host} if registry.username is for it"
        msg = f"{found.message}; registry.username goes to {reg.host} only, not here"
        return Finding(SAMPLES_CHECK, "warn", msg, fix)
    return found


def _probe(check: str, host: str, reg: RegistrySettings, key: str) -> Finding:
    if reg.ca is not None and not reg.ca.is_file():
        return Finding(check, "error", f"registry.ca {reg.ca}: no such file", "fix registry.ca")
    client = OciClient(host, reg)
    try:
        client.ping()
    except RegistryPlainHttp as e:
        fix = "set registry.insecure = true (a plain-HTTP registry: loopback or a lab only)"
        return Finding(check, "error", f"{host}: {e}", fix)
    except RegistryAuthError as e:
        fix = "check registry.username/password (and registry.ca for TLS)"
        return Finding(check, "error", f"{host} refused us: {e}", fix)
    except RegistryUnavailable as e:
        fix = f"check {key}, that the registry runs, and registry.insecure (plain HTTP)"
        return Finding(check, "error", f"cannot reach {host}: {e}", fix)
    except RegistryError as e:
        return Finding(check, "error", f"{host}: {e}", f"is {key} an OCI registry?")
    finally:
        client.close()
    sent = reg.username and (reg.host is None or reg.host == host)
    who = f"as {reg.username}" if sent else "anonymously"
    scheme = "plain HTTP" if reg.insecure else "HTTPS"
    if reg.insecure and not is_loopback_host(host):
        fix = "serve the registry over HTTPS and unset registry.insecure"
        return Finding(check, "warn", f"{host} answers over plain HTTP, {who}", fix)
    return Finding(check, "ok", f"{host} answers the distribution API ({scheme}, {who})")


def is_loopback_host(host: str) -> bool:
    name = host[1 : host.find("]")] if host.startswith("[") else host.split(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False

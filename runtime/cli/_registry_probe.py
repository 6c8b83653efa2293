"""``wasmgate doctor``'s registry check: ``GET /v2/`` as the daemon's puller would send it.

The same client, credentials, CA and timeout as a fleet pull (``wasmgate.runtime.fleet.oci``),
so a pass here means the daemon can reach the registry and is accepted by it.
"""

from __future__ import annotations

import ipaddress

from wasmgate.runtime.cli._checks import Finding
from wasmgate.runtime.fleet.oci import OciClient
from wasmgate.runtime.fleet.ocitypes import RegistryAuthError, RegistryError, RegistryUnavailable
from wasmgate.runtime.ops.config import RegistrySettings

CHECK = "registry"


def probe_registry(reg: RegistrySettings) -> Finding:
    if reg.host is None:
        return Finding(CHECK, "skip", "not configured (set registry.host to check a registry)")
    if reg.ca is not None and not reg.ca.is_file():
        return Finding(CHECK, "error", f"registry.ca {reg.ca}: no such file", "fix registry.ca")
    client = OciClient(reg.host, reg)
    try:
        client.ping()
    except RegistryAuthError as e:
        fix = "check registry.username/password (and registry.ca for TLS)"
        return Finding(CHECK, "error", f"{reg.host} refused us: {e}", fix)
    except RegistryUnavailable as e:
        fix = "check registry.host, that the registry runs, and registry.insecure (plain HTTP)"
        return Finding(CHECK, "error", f"cannot reach {reg.host}: {e}", fix)
    except RegistryError as e:
        return Finding(CHECK, "error", f"{reg.host}: {e}", "is registry.host an OCI registry?")
    finally:
        client.close()
    who = f"as {reg.username}" if reg.username else "anonymously"
    scheme = "plain HTTP" if reg.insecure else "HTTPS"
    if reg.insecure and not is_loopback_host(reg.host):
        fix = "serve the registry over HTTPS and unset registry.insecure"
        return Finding(CHECK, "warn", f"{reg.host} answers over plain HTTP, {who}", fix)
    return Finding(CHECK, "ok", f"{reg.host} answers the distribution API ({scheme}, {who})")


def is_loopback_host(host: str) -> bool:
    name = host[1 : host.find("]")] if host.startswith("[") else host.split(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False

"""Who may talk to the HTTP API from a browser: a Host allow-list and a cross-site refusal.

- DNS rebinding: a page on ``evil.example`` re-resolves its name to 127.0.0.1 and reads the
  answers as same-origin. The browser still sends ``Host: evil.example``, so only names we
  know are answered: loopback names, IP literals (a rebinding page cannot make the browser
  send one) and ``http.allowed_hosts``. Other hosts get 403.
- Cross-site writes: any web page can make a browser POST a ``text/plain`` (or form, or
  typeless) body without a CORS preflight, so the content type proves nothing. Browsers mark
  such requests: ``Origin`` (sent on every POST) and ``Sec-Fetch-Site``. A state-changing
  request whose origin is not the server's own is refused with 403. Device clients, curl,
  tritonclient, the kserve SDK send neither header and are unaffected.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

from aiohttp import hdrs, web
from yarl import URL

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DECIDED_MAX = 1024


def host_name(host: str) -> str:
    """The name part of a ``Host`` value (no port, no brackets, lower case, no final dot)."""
    if host.startswith("["):
        return host[1 : host.find("]")].lower() if "]" in host else host.lower()
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.lower().rstrip(".")


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    name = host_name(host)
    if "*" in allowed or name in allowed or name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _cross_site(request: web.Request) -> str | None:
    """Why ``request`` looks like a browser's cross-site request, or None."""
    fetch_site = request.headers.get("Sec-Fetch-Site", "").lower()
    if fetch_site in {"cross-site", "same-site"}:
        return f"Sec-Fetch-Site: {fetch_site}"
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return None
    try:
        authority = URL(origin).raw_authority.lower()
    except ValueError:  # not even a URL: no browser sends that for its own origin
        authority = None
    if origin == "null" or authority != request.host.lower():
        return f"Origin {origin[:100]!r}"
    return None


def checker(allowed_hosts: Iterable[str]) -> Callable[[web.Request], None]:
    """The check of every request (`wasmgate.runtime.http.edge` calls it inside the error
    mapping, so its 403s become V2 error bodies): raises ``HTTPForbidden`` for a Host
    not served here or a browser's cross-site state-changing request."""
    allowed = frozenset(h.lower().rstrip(".") for h in allowed_hosts)
    # A client sends the same Host on every request: the answer is remembered (parsing an
    # IP address took ~10 µs of a tiny model's request), bounded since clients choose it.
    decided: dict[str, bool] = {}

    def host_ok(host: str) -> bool:
        ok = decided.get(host)
        if ok is None:
            if len(decided) >= _DECIDED_MAX:
                decided.clear()
            ok = decided[host] = host_allowed(host, allowed)
        return ok

    def check(request: web.Request) -> None:
        host = request.headers.get(hdrs.HOST)
        if host is not None and not host_ok(host):
            raise web.HTTPForbidden(
                text=f"host {host[:100]!r} is not served here (see http.allowed_hosts)"
            )
        if request.method not in SAFE_METHODS:
            why = _cross_site(request)
            if why is not None:
                raise web.HTTPForbidden(text=f"cross-site request refused ({why})")

    return check

"""`wasmgate release`: staged releases on a running daemon, through its management API.

- ``stage F.wgb --percent P [--min-requests N] [--max-error-share S] [--max-p99-ratio R]
  [--window-s W]``: ``PUT /v1/bundles?stage=P&…`` (the gates tighten the manifest's
  ``[release]`` table);
- ``promote NAME`` / ``abort NAME``: ``POST /v1/bundles/NAME/promote|abort``;
- ``list``: ``GET /v1/bundles`` (serving, staged candidates with their gates and numbers).

The daemon's address and token come from the config file (``http.host``/``port``/
``management_token``, https when ``http.tls_cert`` is set), ``--url`` and the environment
variable ``WASMGATE_TOKEN`` override them. Prints the daemon's JSON answer; exit 1 with the
daemon's message when it refuses.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from wasmgate.runtime.cli._common import EXIT_OK, CliError, SubParsers
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import load_settings

TOKEN_ENV = "WASMGATE_TOKEN"  # noqa: S105 - a variable name, not a secret
_GATES = ("min_requests", "max_error_share", "max_p99_ratio", "window_s")


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "release",
        help="Stage, promote or abort a release on a running daemon.",
        description="Staged releases through the daemon's management API.",
    )
    parser.add_argument("--config", type=Path, help="The daemon's TOML config file.")
    parser.add_argument("--url", help="Daemon address, e.g. http://127.0.0.1:8080.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    stage = actions.add_parser("stage", help="Upload a bundle as a staged candidate.")
    stage.add_argument("file", type=Path, metavar="F.wgb", help="Signed bundle.")
    stage.add_argument("--percent", type=int, required=True, help="Share of requests, 1..99.")
    stage.add_argument("--min-requests", type=int, help="Gate: requests before judging.")
    stage.add_argument("--max-error-share", type=float, help="Gate: highest error share.")
    stage.add_argument("--max-p99-ratio", type=float, help="Gate: highest p99 ratio.")
    stage.add_argument("--window-s", type=float, help="Gate: observation window, seconds.")
    stage.set_defaults(func=_stage)
    for verb, text in (("promote", "Give the staged version all traffic."),
                       ("abort", "Drop the staged version (the floor stays).")):  # fmt: skip
        action = actions.add_parser(verb, help=text)
        action.add_argument("name", metavar="NAME", help="Bundle name.")
        action.set_defaults(func=_decide)
    actions.add_parser("list", help="Serving and staged versions.").set_defaults(func=_list)


def _stage(args: argparse.Namespace) -> int:
    query: dict[str, Any] = {"stage": args.percent}
    query |= {g: getattr(args, g) for g in _GATES if getattr(args, g) is not None}
    try:
        body = args.file.read_bytes()
    except OSError as e:
        raise CliError(f"{args.file}: {e.strerror or e}") from e
    return _print(_call(args, "PUT", f"/v1/bundles?{urllib.parse.urlencode(query)}", body))


def _decide(args: argparse.Namespace) -> int:
    name = urllib.parse.quote(args.name, safe="")
    return _print(_call(args, "POST", f"/v1/bundles/{name}/{args.action}", b""))


def _list(args: argparse.Namespace) -> int:
    return _print(_call(args, "GET", "/v1/bundles", None))


def _print(answer: Any) -> int:
    print(json.dumps(answer, indent=2))
    return EXIT_OK


def _call(args: argparse.Namespace, method: str, path: str, body: bytes | None) -> Any:
    try:
        http = load_settings(args.config).http
    except ConfigError as e:
        raise CliError(str(e)) from e
    scheme = "https" if http.tls_cert else "http"
    base = (args.url or f"{scheme}://{http.host}:{http.port}").rstrip("/")
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise CliError(f"--url must be an http:// or https:// address, got {base!r}")
    token = os.environ.get(TOKEN_ENV) or http.management_token
    if not token:
        raise CliError(f"no management token: set {TOKEN_ENV} or http.management_token")
    headers = {"Authorization": f"Bearer {token}"}
    # the scheme is checked above: no file: or custom schemes
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)  # noqa: S310
    ctx = ssl.create_default_context(cafile=http.tls_cert) if http.tls_cert else None
    try:
        with urllib.request.urlopen(req, timeout=300, context=ctx) as r:  # noqa: S310
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise CliError(f"{method} {path}: {e.code}: {_message(e.read())}") from e
    except (urllib.error.URLError, OSError) as e:
        raise CliError(f"cannot reach the daemon at {base}: {e}") from e


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")[:200]

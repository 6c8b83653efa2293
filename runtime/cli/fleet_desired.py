"""`wasmgate fleet desired`: hand-made signed desired states (fleet documents).

- ``sign --key K [--key K2] --serial N --expires 1d (--group G | --gateway ID ...)
  --bundle NAME=VERSION@REF ... [--staged NAME=PCT] [--downgrade NAME=VERSION] --out FILE``:
  sign a fleet document with fleet keys (k of the trust file's ``fleet`` role). ``REF`` is
  pinned by digest (``HOST:PORT/REPO@sha256:...``); ``--staged`` asks the gateways to serve
  that share of requests from it next to the current version; ``--downgrade`` is the signed
  permission to go below a bundle's anti-rollback floor to exactly that version.
- ``publish FILE --broker HOST:PORT (--group G | --gateway ID ...)``: publish it retained
  (QoS 1) on ``<prefix>/fleet/<group>/desired`` or ``<prefix>/<gateway>/desired``; the
  target must be the document's own. ``--clear`` instead of FILE removes the retained one.

Gateways check the signatures, the serial (strictly increasing), the expiry and the fleet
role's name scope; this command only refuses what no gateway would accept anyway.
"""

from __future__ import annotations

import argparse
import re
from datetime import datetime
from pathlib import Path

from wasmgate._compat import UTC
from wasmgate.runtime.cli._common import EXIT_OK, EXIT_USAGE, CliError, SubParsers, plain_text
from wasmgate.runtime.cli.fleet import add_broker_args, broker_client
from wasmgate.runtime.cli.keygen import add_passphrase_args, load_signing_key
from wasmgate.runtime.fleet.opclient import BrokerError
from wasmgate.signing import (
    FleetDoc,
    FleetDocError,
    parse_duration,
    sign_fleet,
)
from wasmgate.signing.fleetdoc import TOPIC_LEVEL_RE, peek_fleet
from wasmgate.signing.state import atomic_write
from wasmgate.typed import Invalid, convert


def register(actions: SubParsers[argparse.ArgumentParser]) -> None:
    """Add ``desired sign|publish`` under ``wasmgate fleet``."""
    parser = actions.add_parser(
        "desired",
        help="Sign or publish a hand-made desired state (fleet document).",
        description=plain_text(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    steps = parser.add_subparsers(dest="step", metavar="STEP", required=True)
    _register_sign(steps)
    _register_publish(steps)


def _add_target(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--group", help="Gateway group (one MQTT topic level).")
    target.add_argument("--gateway", action="append", metavar="ID", help="Gateway id (repeatable).")


def _register_sign(steps: SubParsers[argparse.ArgumentParser]) -> None:
    sign = steps.add_parser("sign", help="Sign a fleet document with fleet keys.")
    sign.add_argument("--key", type=Path, action="append", required=True, help="Fleet key.")
    sign.add_argument("--serial", type=int, required=True, help="Above every earlier one.")
    sign.add_argument("--expires", required=True, help="Validity, e.g. 1d, 12h, 2w.")
    _add_target(sign)
    sign.add_argument(
        "--bundle", action="append", default=[], metavar="NAME=VERSION@REF", help="(repeatable)"
    )
    sign.add_argument("--staged", action="append", default=[], metavar="NAME=PCT")
    sign.add_argument("--downgrade", action="append", default=[], metavar="NAME=VERSION")
    sign.add_argument("--out", type=Path, required=True, help="Signed document to write.")
    add_passphrase_args(sign)
    sign.set_defaults(func=_sign)


def _register_publish(steps: SubParsers[argparse.ArgumentParser]) -> None:
    pub = steps.add_parser("publish", help="Publish a signed fleet document (retained).")
    pub.add_argument("file", type=Path, nargs="?", metavar="FILE", help="Signed document.")
    pub.add_argument("--clear", action="store_true", help="Remove the retained document.")
    add_broker_args(pub)
    _add_target(pub)
    pub.set_defaults(func=_publish)


def _pairs(items: list[str], flag: str, shape: str) -> dict[str, str]:
    """``NAME=VALUE`` items by name; a name given twice is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise CliError(f"{flag} {item!r}: expected {shape}", EXIT_USAGE)
        if name in out:
            raise CliError(f"{flag}: {name!r} given twice", EXIT_USAGE)
        out[name] = value
    return out


def _number(text: str, flag: str) -> int:
    if not text.isdigit():
        raise CliError(f"{flag}: {text!r} is not a whole number", EXIT_USAGE)
    return int(text)


def _bundles(args: argparse.Namespace) -> list[dict[str, object]]:
    staged = _pairs(args.staged, "--staged", "NAME=PCT")
    out: list[dict[str, object]] = []
    for name, rest in _pairs(args.bundle, "--bundle", "NAME=VERSION@REF").items():
        version, _, ref = rest.partition("@")
        entry: dict[str, object] = {"name": name, "version": _number(version, "--bundle")}
        entry["ref"] = ref
        if name in staged:
            entry["staged_percent"] = _number(staged.pop(name), "--staged")
        out.append(entry)
    if staged:
        raise CliError(f"--staged {', '.join(staged)}: not among the --bundle names", EXIT_USAGE)
    return out


def _document(args: argparse.Namespace) -> FleetDoc:
    try:
        lifetime = parse_duration(args.expires)
    except ValueError as e:
        raise CliError(f"--expires: {e}", EXIT_USAGE) from e
    now = datetime.now(UTC).replace(microsecond=0)
    downgrades = _pairs(args.downgrade, "--downgrade", "NAME=VERSION")
    data = {
        "serial": args.serial,
        "issued": now,
        "expires": now + lifetime,
        "target": {"group": args.group} if args.group else {"gateways": args.gateway},
        "bundles": _bundles(args),
        "downgrades": [
            {"name": n, "version": _number(v, "--downgrade")} for n, v in downgrades.items()
        ],
    }
    try:
        return convert(data, FleetDoc)  # strict, as a gateway reads it: every value is typed
    except Invalid as e:
        raise CliError(f"fleet document: {e}", EXIT_USAGE) from e


def _sign(args: argparse.Namespace) -> int:
    doc = _document(args)
    keys = [load_signing_key(k, args) for k in args.key]
    try:
        atomic_write(args.out, sign_fleet(doc, keys), 0o644)
    except OSError as e:
        raise CliError(f"{args.out}: {e.strerror}") from e
    target = f"group {doc.target.group}" if doc.target.group else "gateways"
    print(
        f"signed fleet document serial {doc.serial} ({len(doc.bundles)} bundle(s), {target}, "
        f"expires {doc.expires.isoformat()}) with {len(keys)} key(s) -> {args.out}"
    )
    return EXIT_OK


def _read_document(path: Path) -> tuple[bytes, FleetDoc]:
    """The signed file's bytes and its (unverified) document: a gateway verifies."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CliError(f"{path}: {e.strerror}") from e
    try:
        doc = peek_fleet(data)
    except FleetDocError as e:
        raise CliError(f"{path}: not a signed fleet document: {e}") from e
    return data, doc


def _topics(args: argparse.Namespace, doc: FleetDoc | None) -> list[str]:
    """The retained topics to write; refuses a target the document is not for."""
    for name in [args.group] if args.group is not None else args.gateway:
        if not re.fullmatch(TOPIC_LEVEL_RE, name):
            raise CliError(f"{name!r} is not a group or gateway id (one topic level)", EXIT_USAGE)
    if args.group is not None:
        if doc is not None and doc.target.group != args.group:
            raise CliError(f"the document targets {_target(doc)}, not group {args.group!r}")
        return [f"{args.prefix}/fleet/{args.group}/desired"]
    if doc is not None:
        others = [g for g in args.gateway if g not in (doc.target.gateways or [])]
        if others:
            raise CliError(f"the document targets {_target(doc)}, not gateway {others[0]!r}")
    return [f"{args.prefix}/{gw}/desired" for gw in args.gateway]


def _target(doc: FleetDoc) -> str:
    if doc.target.group is not None:
        return f"group {doc.target.group!r}"
    return f"gateways {', '.join(doc.target.gateways or [])}"


def _publish(args: argparse.Namespace) -> int:
    if args.clear == (args.file is not None):
        raise CliError("give either FILE or --clear", EXIT_USAGE)
    data, doc = (b"", None) if args.clear else _read_document(args.file)
    topics = _topics(args, doc)
    try:
        with broker_client(args) as client:
            for topic in topics:
                client.publish(topic, data)
    except BrokerError as e:
        raise CliError(str(e)) from e
    what = "cleared" if doc is None else f"published serial {doc.serial} on"
    print(f"{what} {', '.join(topics)}")
    return EXIT_OK

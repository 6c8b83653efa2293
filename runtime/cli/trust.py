"""`wasmgate trust`: manage the trust store (which keys may sign which bundle names).

- ``add PUBKEY --names 'pattern*' [--max-limit memory_mb=64 ...]``: PUBKEY is a ``.pub``
  file, a key file, or the base64 public key. ``--role fleet`` adds it to the ``fleet`` role
  instead (keys that sign fleet documents, for the role's ``--names``); only a trust document
  with a ``root`` section takes one, and gateways honour it once that is root-signed.
  ``--role root [--threshold K]`` adds a root key (and sets how many root keys must sign):
  that makes the file a draft for ``trust sign``. A key holds one role only.
- ``list [--json]``; ``revoke KEY_ID`` or ``revoke --bundle DIGEST``.
- ``sign DOC --key ROOTKEY [--key ...] --out FILE [--version N]``: sign a trust document
  that has a ``root`` section (k-of-n root keys) for distribution to gateways.

``--trust FILE_OR_DIR`` picks the file (default: ``paths.trust_file`` from the config).
Root-signed trust files are not edited in place: edit the document and re-sign it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from nacl.signing import VerifyKey

from wasmgate.runtime.cli._common import EXIT_OK, EXIT_USAGE, CliError, SubParsers
from wasmgate.runtime.cli.bundle import add_trust_arg, trust_path
from wasmgate.runtime.cli.keygen import add_passphrase_args, load_signing_key
from wasmgate.signing import (
    SigningError,
    TrustDoc,
    TrustStore,
    key_id_of,
    load_public_key,
    sign_trust,
)
from wasmgate.signing.envelope import loads_strict
from wasmgate.signing.state import atomic_write
from wasmgate.typed import convert, replace

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
ROLES = ("signer", "fleet", "root")


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "trust", help="Manage the trust store.", description="Manage the trust store."
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="Trust a signing key for some bundle names.")
    add.add_argument("pubkey", metavar="PUBKEY", help="Public key file or base64 key.")
    add.add_argument(
        "--names",
        action="append",
        default=[],
        help="Name pattern, e.g. 'vision.*' (signer and fleet keys; repeatable).",
    )
    add.add_argument(
        "--max-limit",
        action="append",
        default=[],
        metavar="LIMIT=N",
        help="Ceiling on a manifest limit (repeatable), e.g. memory_mb=64.",
    )
    add.add_argument("--comment", default="", help="Free text shown by `trust list`.")
    add.add_argument(
        "--role",
        choices=ROLES,
        default="signer",
        help="signer: signs bundles (default); fleet: signs fleet documents; root: signs "
        "the trust file itself (a draft for `trust sign`).",
    )
    add.add_argument(
        "--threshold",
        type=int,
        metavar="K",
        help="root and fleet roles: how many of the role's keys must sign (default: kept, "
        "1 for a new role).",
    )
    add_trust_arg(add)
    add.set_defaults(func=_add)
    lst = actions.add_parser("list", help="List trusted keys and revocations.")
    lst.add_argument("--json", action="store_true", help="Print the trust document as JSON.")
    add_trust_arg(lst)
    lst.set_defaults(func=_list)
    rev = actions.add_parser("revoke", help="Revoke a key id or a bundle digest.")
    rev.add_argument("key_id", nargs="?", metavar="KEY_ID", help="Signer key id (64 hex).")
    rev.add_argument("--bundle", metavar="DIGEST", help="Revoke one bundle (manifest digest).")
    add_trust_arg(rev)
    rev.set_defaults(func=_revoke)
    sig = actions.add_parser("sign", help="Sign a trust document with root keys.")
    sig.add_argument("doc", type=Path, metavar="DOC", help="Trust document (JSON) with root.")
    sig.add_argument("--key", type=Path, action="append", required=True, help="Root key.")
    sig.add_argument("--out", type=Path, required=True, help="Signed trust file to write.")
    sig.add_argument(
        "--version",
        type=int,
        default=None,
        help="Sign as this version: a gateway accepts exactly its pinned version + 1.",
    )
    add_passphrase_args(sig)
    sig.set_defaults(func=_sign)


def _load(path: Path) -> TrustStore:
    try:
        return TrustStore.load(path, missing_ok=True)
    except SigningError as e:
        raise CliError(str(e)) from e


def _save(store: TrustStore, path: Path) -> None:
    try:
        store.save(path)
    except (SigningError, OSError) as e:
        raise CliError(str(e)) from e


def _limits(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if not value.isdigit():
            raise CliError(f"--max-limit {item!r}: expected LIMIT=N, e.g. memory_mb=64")
        out[name] = int(value)
    return out


def _add(args: argparse.Namespace) -> int:
    path = trust_path(args)
    _check_add_flags(args)
    public = _public_key(args.pubkey)
    store = _load(path)
    _check_role(store, key_id_of(public), args)
    try:
        if args.role == "root":
            store = store.with_root_key(public, args.threshold)
        elif args.role == "fleet":
            store = store.with_fleet_key(public, args.names, args.threshold)
        else:
            limits = _limits(args.max_limit)
            store = store.with_signer(public, args.names, limits, args.comment)
    except SigningError as e:
        raise CliError(str(e)) from e
    _save(store, path)
    print(f"trusted key {key_id_of(public)}{_added_as(args, store)} in {path}")
    return EXIT_OK


def _public_key(arg: str) -> VerifyKey:
    """A key file, or the base64 key; anything else is a usage error, said in one line."""
    try:
        return load_public_key(arg)
    except SigningError as e:
        if not Path(arg).exists() and len(arg) != 44:  # 44: the length of a base64 key
            raise CliError(f"{arg}: no such key file", EXIT_USAGE) from e
        raise CliError(
            f"{arg}: not a wasmgate Ed25519 public key (`wasmgate keygen` makes one): {e}",
            EXIT_USAGE,
        ) from e


def _check_add_flags(args: argparse.Namespace) -> None:
    """Flags that do not fit the role are usage errors, refused before anything is read."""
    if args.role != "signer" and (args.max_limit or args.comment):
        raise CliError(f"--max-limit and --comment are for signer keys, not --role {args.role}", 2)
    if args.role == "root" and args.names:
        raise CliError("--names is not for --role root: root keys sign only the trust file", 2)
    if args.role != "root" and not args.names:
        raise CliError(f"--role {args.role} needs --names (the bundle names it is for)", 2)
    if args.role == "signer" and args.threshold is not None:
        raise CliError("--threshold is for --role root or fleet (k of the role's keys)", 2)
    if args.threshold is not None and args.threshold < 1:
        raise CliError(f"--threshold {args.threshold}: must be at least 1", 2)


def _check_role(store: TrustStore, kid: str, args: argparse.Namespace) -> None:
    """One key, one role (a root key that also signs bundles is no longer offline); the
    threshold never above the keys the role will have."""
    held = store.role_of(kid)
    if args.role == "root" and held == "root":
        raise CliError(f"key {kid} is already a root key of this trust document", 2)
    if held not in (None, args.role):
        raise CliError(
            f"key {kid} is already a {held} key: give each role its own key "
            "(`wasmgate keygen`)", 2
        )  # fmt: skip
    doc = store.doc
    section = doc.root if args.role == "root" else doc.fleet if args.role == "fleet" else None
    count = (len(section.keys) if section else 0) + (held is None)
    if args.threshold is not None and args.threshold > count:
        raise CliError(
            f"--threshold {args.threshold}: larger than the {count} {args.role} key(s) this "
            f"document would have (add the keys first)", 2
        )  # fmt: skip


def _added_as(args: argparse.Namespace, store: TrustStore) -> str:
    doc = store.doc
    if args.role == "root" and doc.root is not None:
        return f" as a root key (threshold {doc.root.threshold} of {len(doc.root.keys)})"
    if args.role == "fleet":
        return f" as a fleet key for {', '.join(args.names)}"
    return f" for {', '.join(args.names)}"


def _list(args: argparse.Namespace) -> int:
    path = trust_path(args)
    doc = _load(path).doc
    if args.json:
        print(doc.to_json().decode(), end="")
        return EXIT_OK
    root = f", root {doc.root.threshold} of {len(doc.root.keys)}" if doc.root else ""
    fleet = f", fleet {doc.fleet.threshold} of {len(doc.fleet.keys)}" if doc.fleet else ""
    print(f"{path}: version {doc.version}{root}{fleet}, {len(doc.signers)} signer(s)")
    for kid, role, names, extra in _roles(doc):
        state = "REVOKED" if kid in doc.revoked.keys else "trusted"
        print(f"  {kid}  {role:<6}  {state:<7}  {names}{extra}")
    for kid in doc.revoked.keys:
        if kid not in doc.signers and (doc.fleet is None or kid not in doc.fleet.keys):
            print(f"  {kid}  REVOKED  (not a signer)")
    for digest in doc.revoked.bundles:
        print(f"  bundle {digest}  REVOKED")
    return EXIT_OK


def _roles(doc: TrustDoc) -> list[tuple[str, str, str, str]]:
    """(key id, role, names, extra) of every key: root, fleet, then the bundle signers."""
    root_keys = sorted(doc.root.keys) if doc.root else []
    rows = [(kid, "root", "(signs the trust file)", "") for kid in root_keys]
    if doc.fleet is not None:
        fleet_names = ", ".join(doc.fleet.names)
        rows += [(kid, "fleet", fleet_names, "") for kid in sorted(doc.fleet.keys)]
    for kid, s in sorted(doc.signers.items()):
        limits = " ".join(f"{k}<={v}" for k, v in s.max_limits.items())
        extra = (f"  [{limits}]" if limits else "") + (f"  # {s.comment}" if s.comment else "")
        rows.append((kid, "signer", ", ".join(s.names), extra))
    return rows


def _revoke(args: argparse.Namespace) -> int:
    if (args.key_id is None) == (args.bundle is None):
        raise CliError("give either KEY_ID or --bundle DIGEST", 2)
    value = (args.key_id or args.bundle).lower()
    if not _HEX64.fullmatch(value):
        raise CliError(f"{value!r}: expected 64 hex digits")
    path = trust_path(args)
    store = _load(path)
    try:
        if args.key_id:
            store = store.with_revoked(key_id=value)
        else:
            store = store.with_revoked(digest=value)
    except SigningError as e:
        raise CliError(str(e)) from e
    _save(store, path)
    what = "key" if args.key_id else "bundle"
    print(f"revoked {what} {value} in {path}")
    return EXIT_OK


def _sign(args: argparse.Namespace) -> int:
    try:
        doc = convert(loads_strict(args.doc.read_bytes()), TrustDoc)
    except (OSError, ValueError) as e:  # EnvelopeFormatError, wasmgate.typed.Invalid
        raise CliError(f"{args.doc}: not a valid trust document: {e}") from e
    if doc.root is None:
        raise CliError(f"{args.doc}: a signed trust file needs a 'root' section")
    if args.version is not None:
        # each `trust add` bumps a draft's version; the rotation rule wants exactly pinned+1
        if args.version < 1:
            raise CliError(f"--version {args.version}: must be at least 1", 2)
        doc = replace(doc, version=args.version)
    keys = [load_signing_key(k, args) for k in args.key]
    data = sign_trust(doc, keys)
    try:
        TrustStore.from_bytes(data, str(args.out))
        atomic_write(args.out, data, 0o644)
    except (SigningError, OSError) as e:
        raise CliError(str(e)) from e
    print(f"signed trust version {doc.version} with {len(keys)} key(s) -> {args.out}")
    return EXIT_OK

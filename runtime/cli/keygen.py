"""`wasmgate keygen`: generate an Ed25519 signing key.

Writes the private key (mode 0600, never overwriting) and ``KEY.pub``, then prints the
public key (base64) and the key id (hex SHA-256 of the public key). A passphrase (from
``--passphrase-file``, ``$WASMGATE_KEY_PASSPHRASE`` or an interactive prompt with
``--encrypt``) seals the key with argon2id + SecretBox.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

import nacl.signing

from wasmgate.runtime.cli._common import EXIT_OK, CliError, SubParsers
from wasmgate.signing import (
    SigningError,
    encode_public,
    generate_key,
    key_id_of,
    read_private_key,
    write_private_key,
    write_public_key,
)

PASSPHRASE_ENV = "WASMGATE_KEY_PASSPHRASE"  # noqa: S105 - a variable name, not a secret


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "keygen",
        help="Generate an Ed25519 signing key.",
        description="Generate an Ed25519 signing key: KEY (private, 0600) and KEY.pub.",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="KEY", help="Private key path.")
    add_passphrase_args(parser)
    parser.add_argument(
        "--encrypt", action="store_true", help="Protect the key with a passphrase (prompted)."
    )
    parser.set_defaults(func=_run)


def add_passphrase_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--passphrase-file",
        type=Path,
        metavar="FILE",
        help=f"Read the key passphrase from FILE's first line (else ${PASSPHRASE_ENV}).",
    )


def passphrase_from(args: argparse.Namespace) -> bytes | None:
    """The passphrase from --passphrase-file or the environment, if any."""
    path: Path | None = args.passphrase_file
    if path is not None:
        try:
            line = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise CliError(f"--passphrase-file {path}: {e.strerror}") from e
        if not line or not line[0]:
            raise CliError(f"--passphrase-file {path}: empty")
        return line[0].encode()
    env = os.environ.get(PASSPHRASE_ENV)
    return env.encode() if env else None


def load_signing_key(path: Path, args: argparse.Namespace) -> nacl.signing.SigningKey:
    """Load a private key, prompting for its passphrase on a terminal if needed."""
    passphrase = passphrase_from(args)
    try:
        return read_private_key(path, passphrase)
    except SigningError as e:
        if passphrase is not None or "no passphrase" not in str(e) or not sys.stdin.isatty():
            raise CliError(str(e)) from e
    secret = getpass.getpass(f"passphrase for {path}: ").encode()
    try:
        return read_private_key(path, secret)
    except SigningError as e:
        raise CliError(str(e)) from e


def _new_passphrase(args: argparse.Namespace) -> bytes | None:
    given = passphrase_from(args)
    if given is not None or not args.encrypt:
        return given
    if not sys.stdin.isatty():
        raise CliError(f"--encrypt needs a terminal, --passphrase-file or ${PASSPHRASE_ENV}")
    first = getpass.getpass("new passphrase: ")
    if not first or first != getpass.getpass("repeat passphrase: "):
        raise CliError("passphrases are empty or do not match")
    return first.encode()


def _run(args: argparse.Namespace) -> int:
    out: Path = args.out
    pub = out.with_name(out.name + ".pub")
    for p in (out, pub):
        if p.exists():
            raise CliError(f"{p}: already exists, refusing to overwrite")
    passphrase = _new_passphrase(args)
    key = generate_key()
    try:
        write_private_key(out, key, passphrase)
        write_public_key(pub, key.verify_key)
    except SigningError as e:
        raise CliError(str(e)) from e
    print(f"public key: {encode_public(key.verify_key)}")
    print(f"key id:     {key_id_of(key.verify_key)}")
    sealed = "passphrase-protected" if passphrase else "unencrypted"
    print(f"wrote {out} (private, mode 0600, {sealed}) and {pub}")
    return EXIT_OK

"""`wasmgate bundle push|pull`: bundles as OCI artifacts in any registry.

- ``push F.wgb HOST[:PORT]/REPO:TAG [--insecure] [--json]``: uploads the bundle as an
  artifact (type ``application/vnd.wasmgate.bundle.v1+tar``, one layer, annotated with the
  bundle's name and version) and prints the manifest digest and the pinned reference
  ``HOST/REPO@sha256:…`` that fleet documents carry.
- ``pull REF --out F.wgb [--insecure] [--json]``: REF is ``HOST/REPO:TAG`` or
  ``HOST/REPO@sha256:…``. The manifest must be a wasmgate bundle (media type), hash to the
  digest asked for, and declare a layer within ``registry.max_bundle_bytes``; the layer
  must hash to its digest. ``--out`` is replaced only once all of that holds. The bundle's
  signature is not checked here (``wasmgate bundle verify``; the daemon always does).

Credentials and CA come from the ``[registry]`` section of the config (``--config``).
Exit codes: 0 done, 1 refused or failed (the message says which and why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import secrets
from pathlib import Path
from typing import Any

from wasmgate.runtime.cli._common import EXIT_OK, EXIT_USAGE, CliError, SubParsers
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import (
    BUNDLE_NAME,
    BUNDLE_VERSION,
    Artifact,
    Reference,
    RegistryError,
)
from wasmgate.runtime.ops.config import RegistrySettings, load_settings
from wasmgate.signing import SigningError, inspect_bundle
from wasmgate.typed import replace

MAX_PUSH_BYTES = 2 * 1024**3  # the same ceiling as `bundle inspect`


def register(actions: SubParsers[argparse.ArgumentParser]) -> None:
    push = actions.add_parser("push", help="Upload a bundle to an OCI registry.")
    push.add_argument("file", type=Path, metavar="F.wgb", help="Bundle file.")
    push.add_argument("ref", metavar="HOST:PORT/REPO:TAG", help="Where to push it.")
    _common_args(push)
    push.set_defaults(func=_push)
    pull = actions.add_parser("pull", help="Download a bundle from an OCI registry.")
    pull.add_argument("ref", metavar="REF", help="HOST:PORT/REPO:TAG or HOST:PORT/REPO@sha256:…")
    pull.add_argument("--out", type=Path, required=True, metavar="F.wgb", help="File to write.")
    _common_args(pull)
    pull.set_defaults(func=_pull)


def _common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--insecure", action="store_true", help="Plain HTTP (a registry on loopback or in a lab)."
    )
    parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
    parser.add_argument("--config", type=Path, help="Config file with a [registry] section.")


def _setup(args: argparse.Namespace, *, tag_only: bool) -> tuple[Reference, RegistrySettings]:
    try:
        ref = Reference.parse(args.ref)
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    if tag_only and ref.digest is not None:
        raise CliError(f"{args.ref}: push to a :TAG (the digest is the registry's)", EXIT_USAGE)
    try:
        settings = load_settings(args.config).registry
    except ConfigError as e:
        raise CliError(str(e)) from e
    if args.insecure:
        settings = replace(settings, insecure=True)
    return ref, settings


def _push(args: argparse.Namespace) -> int:
    ref, settings = _setup(args, tag_only=True)
    try:
        info = inspect_bundle(args.file, max_bundle_bytes=MAX_PUSH_BYTES)
    except SigningError as e:
        raise CliError(f"{args.file}: not a bundle: {e}") from e
    m = info.manifest
    notes = {BUNDLE_NAME: m.name, BUNDLE_VERSION: str(m.version)}
    client = OciClient(ref.host, settings)
    try:
        art = client.push(args.file, ref, notes)
    except (RegistryError, OSError) as e:
        raise CliError(f"push {ref}: {e}") from e
    finally:
        client.close()
    _report(args, "pushed", ref, art, f"{m.label()} ({art.layer_size} bytes)")
    return EXIT_OK


def _pull(args: argparse.Namespace) -> int:
    ref, settings = _setup(args, tag_only=False)
    out: Path = args.out
    client = OciClient(ref.host, settings)
    try:
        art = client.resolve(ref, settings.max_bundle_bytes)
        part = out.with_name(f".{out.name}.{secrets.token_hex(6)}.part")
        try:
            with part.open("xb") as sink:
                client.download(ref, art, sink)
            part.replace(out)  # only a verified layer ever takes --out's name
        finally:
            part.unlink(missing_ok=True)
    except (RegistryError, OSError) as e:
        raise CliError(f"pull {ref}: {e}") from e
    finally:
        client.close()
    name = art.annotations.get(BUNDLE_NAME, "?")
    version = art.annotations.get(BUNDLE_VERSION, "?")
    _report(args, "pulled", ref, art, f"{name}@{version} -> {out} ({art.layer_size} bytes)")
    return EXIT_OK


def _report(args: argparse.Namespace, verb: str, ref: Reference, art: Artifact, what: str) -> None:
    pinned = str(ref.pinned(art.digest))
    if args.json:
        doc: dict[str, Any] = {
            "ref": pinned,
            "digest": art.digest,
            "tag": ref.tag,
            "layer_digest": art.layer_digest,
            "size": art.layer_size,
            "annotations": art.annotations,
        }
        print(json.dumps(doc, indent=2))
        return
    print(f"{verb} {what}")
    print(f"digest {art.digest}")
    print(f"ref {pinned}")

"""`wasmgate bundle`: build, verify, inspect, push and pull signed bundles.

- ``build DIR --key KEY [--version N] [--expires 90d] --out F.wgb``: DIR holds
  ``bundle.toml`` (format: ``wasmgate.signing.build``) and the files it names. When DIR has
  the adapter's source (``*.c`` or ``adapter.zig``) and it is newer than the ``.wasm``
  bundle.toml names, the module is rebuilt first: a bundle never ships a stale adapter.
- ``verify F [--trust FILE_OR_DIR] [--state-dir DIR]``: the full verification the daemon
  does (with ``--state-dir``, also the anti-rollback check); exit 1 with the reason.
- ``inspect F [--json]``: the manifest as stated in the bundle, *without* verification.
- ``push``/``pull``: bundles as OCI artifacts in a registry (``bundle_oci.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from wasmgate._compat import tomllib
from wasmgate.guest_adapters.build import refresh_adapter
from wasmgate.guest_adapters.errors import AdapterBuildError, GuestAdapterError
from wasmgate.runtime.cli import bundle_oci
from wasmgate.runtime.cli._common import EXIT_OK, CliError, SubParsers, say
from wasmgate.runtime.cli.keygen import add_passphrase_args, load_signing_key
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import load_settings
from wasmgate.signing import (
    BundleInfo,
    Manifest,
    SigningError,
    StateFile,
    TrustStore,
    build_bundle,
    inspect_bundle,
    parse_duration,
    verify_bundle,
)
from wasmgate.typed import plain

MAX_BUNDLE_BYTES = 2 * 1024**3


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "bundle",
        help="Build, verify, inspect, push and pull signed bundles.",
        description="Build, verify, inspect, push and pull signed bundles.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build",
        help="Build and sign a bundle from DIR/bundle.toml.",
        description="Build and sign a bundle from DIR/bundle.toml. The bundle expires 90 days "
        "after it is built unless --expires says otherwise.",
    )
    build.add_argument("dir", type=Path, metavar="DIR", help="Directory with bundle.toml.")
    build.add_argument("--key", type=Path, required=True, help="Private signing key file.")
    build.add_argument("--version", type=int, help="Bundle version (overrides bundle.toml).")
    build.add_argument(
        "--expires",
        default="90d",
        help="How long the bundle stays valid from now, e.g. 90d, 12h, 2w (default: 90d). "
        "Gateways refuse to install it after that; one already installed keeps serving with "
        "a warning, or stops with trust.expiry = 'stop'. Before then, build it again with a "
        "higher --version.",
    )
    build.add_argument("--out", type=Path, required=True, metavar="F.wgb", help="Bundle to write.")
    add_passphrase_args(build)
    build.set_defaults(func=_build)
    verify = actions.add_parser("verify", help="Verify a bundle against the trust store.")
    verify.add_argument("file", type=Path, metavar="F", help="Bundle file (.wgb).")
    add_trust_arg(verify)
    verify.add_argument(
        "--state-dir", type=Path, help="Also check against this anti-rollback state."
    )
    verify.set_defaults(func=_verify)
    inspect = actions.add_parser("inspect", help="Show a bundle's manifest (not verified).")
    inspect.add_argument("file", type=Path, metavar="F", help="Bundle file (.wgb).")
    inspect.add_argument("--json", action="store_true", help="Print JSON.")
    inspect.set_defaults(func=_inspect)
    bundle_oci.register(actions)


def add_trust_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust",
        type=Path,
        metavar="FILE_OR_DIR",
        help="Trust file (or a directory holding trust.json); default from the config.",
    )


def trust_path(args: argparse.Namespace) -> Path:
    """The trust file named by --trust (a directory means DIR/trust.json) or the default."""
    given: Path | None = args.trust
    if given is None:
        # What the daemon and `wasmgate doctor` read: the environment's paths
        # (WASMGATE_PATHS__TRUST_FILE, ..._DATA_DIR) over the config file's (the default
        # /etc/wasmgate/config.toml when it exists) over the defaults.
        try:
            return load_settings(None).paths.resolved_trust_file()
        except ConfigError as e:
            raise CliError(str(e)) from e
    return given / "trust.json" if given.is_dir() else given


def _refresh_adapter(directory: Path) -> None:
    """Rebuild the bundle's adapter module when its source is newer (see refresh_adapter)."""
    try:
        doc = tomllib.loads((directory / "bundle.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return  # build_bundle reports it with the manifest's own wording
    adapter = doc.get("adapter")
    name = adapter.get("file") if isinstance(adapter, dict) else None
    if not isinstance(name, str) or not name.endswith(".wasm") or "/" in name:
        return
    why = "the source was newer" if (directory / name).is_file() else f"there was no {name}"
    try:
        built = refresh_adapter(directory, directory / name, progress=say)
    except AdapterBuildError as e:
        if e.output:
            print(e.output, file=sys.stderr)
        raise CliError(f"{name} is older than its source and rebuilding it failed: {e}") from e
    except GuestAdapterError as e:
        raise CliError(str(e)) from e
    if built is not None:
        print(f"{name}: built from source ({why}), sha256 {built.sha256}")


def _build(args: argparse.Namespace) -> int:
    _refresh_adapter(args.dir)
    key = load_signing_key(args.key, args)
    try:
        expires = parse_duration(args.expires)
    except ValueError as e:
        raise CliError(f"--expires: {e}") from e
    try:
        m = build_bundle(args.dir, key, args.out, version=args.version, expires_in=expires)
    except (SigningError, OSError) as e:
        raise CliError(str(e)) from e
    size = args.out.stat().st_size
    print(f"built {m.label()} -> {args.out} ({len(m.files)} files, {size} bytes)")
    print(f"signed by {m.key_id}, expires {m.expires.isoformat()}")
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    path = trust_path(args)
    try:
        trust = TrustStore.load(path)
        state = StateFile(args.state_dir).load() if args.state_dir else None
        v = verify_bundle(args.file, trust, max_bundle_bytes=MAX_BUNDLE_BYTES, state=state)
    except SigningError as e:
        raise CliError(str(e)) from e
    m = v.manifest
    print(f"OK {m.label()}: signed by trusted key {v.key_id}, {len(m.files)} files verified")
    print(f"digest {v.digest}, expires {m.expires.isoformat()}")
    return EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    try:
        info = inspect_bundle(args.file, max_bundle_bytes=MAX_BUNDLE_BYTES)
    except SigningError as e:
        raise CliError(str(e)) from e
    if args.json:
        doc: dict[str, Any] = {
            "verified": False,
            "digest": info.digest,
            "signers": info.key_ids,
            "size": info.size,
            "manifest": plain(info.manifest, omit_none=True),
        }
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join(describe(info)))
    return EXIT_OK


def _row(key: str, value: object) -> str:
    return f"{key:<13}{value}"


def _on(flags: dict[str, bool]) -> str:
    return ", ".join(k for k, v in flags.items() if v) or "off"


def _models(m: Manifest) -> list[str]:
    out = []
    for e in m.models:
        variants = " ".join(f"{p}={f}" for p, f in e.variants.items())
        b = e.batching
        batch = f"batch {b.max_batch_size}/{b.max_queue_delay_us}us"
        out.append(_row("model", f"{e.name} ({e.format}) {variants}; {batch}"))
        out.extend(_row("", f"  {t.name}: {t.datatype} {t.shape}") for t in [*e.inputs, *e.outputs])
    return out


def describe(info: BundleInfo) -> list[str]:
    """Human-readable lines for ``inspect``."""
    m = info.manifest
    adapter = f"{m.adapter.file} ({m.adapter.mode})" if m.adapter else "none"
    limits = " ".join(f"{k}={v}" for k, v in plain(m.limits, omit_none=True).items())
    targets = " ".join([*m.targets.profiles, *m.targets.arch]) or "any"
    lines = [
        _row("bundle", f"{m.label()}  (NOT verified: use `wasmgate bundle verify`)"),
        _row("description", m.description or "-"),
        _row("digest", info.digest),
        _row("signed by", ", ".join(info.key_ids) or "-"),
        _row("issued", m.issued_at.isoformat()),
        _row("expires", m.expires.isoformat()),
        _row("daemon", f">= {m.min_daemon_version}"),
        _row("adapter", adapter),
        *_models(m),
        _row("routes", f"http={m.routes.http} mqtt={m.routes.mqtt}"),
        _row("limits", limits),
        _row("targets", targets),
        _row("fallback", _on(plain(m.fallback))),
        _row("params", json.dumps(m.params) if m.params else "-"),
        _row("variables", ", ".join(sorted(m.variables or {})) or "-"),
        _row("state", f"{m.state.max_bytes} bytes, {m.state.max_keys} keys" if m.state else "-"),
        _row("files", f"{len(m.files)}, {m.total_size()} bytes"),
    ]
    width = max((len(n) for n in m.files), default=0)
    lines += [f"  {n:<{width}}  {f.size:>12}  {f.sha256}" for n, f in sorted(m.files.items())]
    return lines

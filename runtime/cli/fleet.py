"""`wasmgate fleet`: operate a fleet of gateways through the MQTT broker and an OCI registry.

- ``rollout --broker HOST:PORT --group G --key FLEET_KEY REF``: publish per-gateway signed
  desired documents wave by wave (``--waves 1,10%,100%``), wait for the gateways' deployment
  reports, abort on ``--abort-failed`` after ``--min-done`` finished gateways and send the
  gateways that moved back to their previous bundles; on success publish the group document.
  REF is resolved in the registry (``--insecure`` for plain HTTP; credentials and CA from
  the ``[registry]`` section of ``--config``); documents always carry the digest.
  A REF older than what a gateway's current document asks for is a rollback: refused
  unless ``--allow-downgrade`` (the documents then grant the signed downgrade to it).
  Exit 0 when applied everywhere, 1 when aborted, 2 on usage errors or a refused start.
- ``status --broker HOST:PORT [--group G] [--json]``: gateways x bundles from the retained
  deployment reports, with the time of each report and drift from the group's document;
  each failure or refusal below the table with its whole reason (a gateway whose rollout
  failed and was rolled back reads ``failed, rolled back``). A ``--group`` no gateway
  reports is refused with exit code 2 (as ``rollout`` refuses it), not an empty table.
- ``desired sign|publish``: hand-made signed desired states (``fleet_desired.py``).

The CLI talks only to the broker and the registry, never to a daemon directly.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from datetime import timedelta
from pathlib import Path

from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs in the test extras

from wasmgate.runtime.cli._common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    SubParsers,
    plain_text,
    say,
)
from wasmgate.runtime.cli.keygen import add_passphrase_args, load_signing_key
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.fleet.driver import Rollout, RolloutPlan, RolloutRefused, RolloutResult
from wasmgate.runtime.fleet.opclient import (
    BrokerError,
    BrokerSettings,
    OperatorClient,
    parse_broker,
)
from wasmgate.runtime.fleet.rollout import RolloutUsageError, Wanted, parse_size, parse_waves
from wasmgate.runtime.fleet.status import (
    problem_lines,
    render_table,
    split_topics,
    status_json,
    status_table,
)
from wasmgate.runtime.fleet.waves import Row
from wasmgate.runtime.oci.client import OciClient
from wasmgate.runtime.oci.ocitypes import BUNDLE_NAME, BUNDLE_VERSION, Reference, RegistryError
from wasmgate.runtime.ops.config import load_settings
from wasmgate.typed import replace

DEFAULT_PREFIX = "wasmgate/v1"


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "fleet",
        help="Roll bundles out to a fleet and show its state (MQTT + OCI registry).",
        description=plain_text(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _register_rollout(actions)
    _register_status(actions)
    # imported here: fleet_desired uses this module's broker helpers (no import cycle)
    importlib.import_module("wasmgate.runtime.cli.fleet_desired").register(actions)


def add_broker_args(parser: argparse.ArgumentParser) -> None:
    """The broker connection flags every fleet subcommand shares."""
    parser.add_argument("--broker", required=True, metavar="HOST:PORT", help="MQTT broker.")
    parser.add_argument(
        "--prefix", default=DEFAULT_PREFIX, help=f"Topic prefix (default {DEFAULT_PREFIX})."
    )
    parser.add_argument("--username", default=None, help="Broker user name.")
    parser.add_argument("--password", default=None, help="Broker password.")
    parser.add_argument("--tls", action="store_true", help="Connect to the broker over TLS.")
    parser.add_argument("--ca", type=Path, default=None, help="CA file for the broker's TLS.")


def _register_rollout(actions: SubParsers[argparse.ArgumentParser]) -> None:
    roll = actions.add_parser(
        "rollout", help="Roll a bundle out to a group in waves, with automatic abort."
    )
    roll.add_argument("ref", metavar="REF", help="HOST:PORT/REPO:TAG or HOST:PORT/REPO@sha256:...")
    add_broker_args(roll)
    roll.add_argument("--group", required=True, help="Gateway group to roll out to.")
    roll.add_argument("--key", type=Path, action="append", required=True, help="Fleet key.")
    roll.add_argument(
        "--waves", default="1,10%,100%", help="Cumulative wave sizes (default: %(default)s)."
    )
    roll.add_argument(
        "--abort-failed",
        default="10%",
        help="Abort when failed/done exceeds this, N or N%% (default: %(default)s).",
    )
    roll.add_argument(
        "--min-done",
        type=int,
        default=1,
        help="Finished gateways before aborting (default: %(default)s).",
    )
    roll.add_argument(
        "--wave-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="A gateway that has not reported its wave's document after this long counts as "
        "finished and failed (default: %(default).0f s, 10 minutes).",
    )
    roll.add_argument(
        "--expires",
        type=float,
        default=30 * 86400.0,
        metavar="SECONDS",
        help="Validity of the signed desired-state documents (default: %(default).0f s, 30 "
        "days). A gateway refuses an expired document (reported as refused); what it already "
        "applied keeps serving. Roll out again before then to reach gateways still offline.",
    )
    roll.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="Roll back on purpose: REF may be older than what the gateways run (the "
        "documents grant the signed downgrade to exactly its version).",
    )
    roll.add_argument("--insecure", action="store_true", help="Plain-HTTP registry (loopback).")
    roll.add_argument("--config", type=Path, help="Config file with a [registry] section.")
    add_passphrase_args(roll)
    roll.set_defaults(func=_rollout)


def _register_status(actions: SubParsers[argparse.ArgumentParser]) -> None:
    status = actions.add_parser("status", help="Gateways x bundles from the deployment reports.")
    add_broker_args(status)
    status.add_argument("--group", default=None, help="Only gateways of this group.")
    status.add_argument("--json", action="store_true", help="Print JSON.")
    status.add_argument(
        "--wait", type=float, default=2.0, metavar="SECONDS", help="Time to collect reports."
    )
    status.set_defaults(func=_status)


def broker_client(args: argparse.Namespace) -> OperatorClient:
    """The operator's broker connection from the `add_broker_args` flags."""
    try:
        host, port = parse_broker(args.broker)
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    tls = args.tls or args.ca is not None
    return OperatorClient(BrokerSettings(host, port, args.username, args.password, tls, args.ca))


def _plan(args: argparse.Namespace, new: Wanted) -> RolloutPlan:
    try:
        waves = parse_waves(args.waves)
        abort = parse_size(args.abort_failed, what="--abort-failed")
    except RolloutUsageError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    if args.min_done < 0 or not 0 < args.wave_timeout <= 7 * 86400 or args.expires <= 0:
        raise CliError("--min-done, --wave-timeout and --expires must be positive", EXIT_USAGE)
    return RolloutPlan(
        args.group, new, waves, abort, args.min_done, args.wave_timeout,
        timedelta(seconds=args.expires), args.allow_downgrade,
    )  # fmt: skip


def resolve_bundle(text: str, *, insecure: bool, config: Path | None = None) -> Wanted:
    """Name, version and pinned reference of the bundle artifact ``text`` names (a tag is
    resolved to its manifest digest: the documents always carry the digest)."""
    try:
        ref = Reference.parse(text)
        settings = load_settings(config).registry
    except (ValueError, ConfigError) as e:
        raise CliError(str(e), EXIT_USAGE) from e
    if insecure:
        settings = replace(settings, insecure=True)
    client = OciClient(ref.host, settings)
    try:
        art = client.resolve(ref, settings.max_bundle_bytes)
    except RegistryError as e:
        raise CliError(f"resolve {ref}: {e}", EXIT_USAGE) from e
    finally:
        client.close()
    name, version = art.annotations.get(BUNDLE_NAME), art.annotations.get(BUNDLE_VERSION, "")
    if name is None or not version.isdigit():
        raise CliError(f"{ref}: the manifest does not name a wasmgate bundle and version", 2)
    return Wanted(name, int(version), str(ref.pinned(art.digest)))


def _rollout(args: argparse.Namespace) -> int:
    keys = [load_signing_key(path, args) for path in args.key]
    new = resolve_bundle(args.ref, insecure=args.insecure, config=args.config)
    plan = _plan(args, new)
    say(f"rolling out {new.name} v{new.version} ({new.ref}) to group {plan.group}")
    try:
        with broker_client(args) as client, tqdm(unit="gw", file=sys.stderr, disable=None) as bar:
            rollout = Rollout(client, args.prefix, keys, progress=lambda row: _tick(bar, row))
            result = rollout.run(plan, on_start=bar.reset)
    except (BrokerError, RolloutRefused) as e:
        raise CliError(str(e), EXIT_USAGE) from e
    print(rollout_table(result))
    if result.aborted_at is not None:
        say(f"aborted in wave {result.aborted_at}: the gateways that moved were sent back")
        return EXIT_FAILURE
    if not result.applied_everywhere:
        say("finished, but not every gateway applied the new version")
        return EXIT_FAILURE
    return EXIT_OK


def _tick(bar: tqdm, row: Row) -> None:
    bar.set_description(f"wave {row.wave}", refresh=False)
    bar.update()


def rollout_table(result: RolloutResult) -> str:
    """The final table: one row per gateway."""
    rows = [
        [r.gateway, str(r.wave), r.state, "-" if r.version is None else f"v{r.version}"]
        for r in result.rows
    ]  # fmt: skip
    # each error whole, below the table: a cell cut at a width cut the hint at its end
    errors = problem_lines((r.gateway, r.error) for r in result.rows if r.error)
    return render_table(["gateway", "wave", "state", "version"], rows) + errors


def _status(args: argparse.Namespace) -> int:
    filters = [f"{args.prefix}/+/deployment", f"{args.prefix}/+/desired"]
    filters.append(f"{args.prefix}/fleet/+/desired")
    try:
        with broker_client(args) as client:
            view = split_topics(args.prefix, client.collect(filters, args.wait))
    except BrokerError as e:
        raise CliError(str(e)) from e
    if args.group is not None and not view.members(args.group):
        # a typo must not read as an empty, healthy group: refused like `fleet rollout`
        groups = sorted({g for r in view.reports.values() for g in r.groups})
        seen = ", ".join(groups) if groups else "none"
        raise CliError(
            f"no gateway reports group {args.group!r} under {args.prefix.rstrip('/')}/ "
            f"(groups reported: {seen})",
            EXIT_USAGE,
        )
    if args.json:
        print(json.dumps(status_json(view, args.group), indent=2))
    else:
        print(status_table(view, args.group))
    return EXIT_OK

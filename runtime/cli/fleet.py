"""`wasmgate fleet`: operate a fleet of gateways through the MQTT broker and an OCI registry.

- ``rollout --broker HOST:PORT --group G --key FLEET_KEY REF``: publish per-gateway signed
  desired documents wave by wave (``--waves 1,10%,100%``), wait for the gateways' deployment
  reports, abort on ``--abort-failed`` after ``--min-done`` finished gateways and send the
  gateways that moved back to their previous bundles; on success publish the group document.
  Exit 0 when applied everywhere, 1 when aborted, 2 on usage errors or a refused start.
- ``status --broker HOST:PORT [--group G] [--json]``: gateways x bundles from the retained
  deployment reports, with the time of each report and drift from the group's document.

The CLI talks only to the broker and the registry, never to a daemon directly.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wasmgate.runtime.cli._common import EXIT_USAGE, CliError, SubParsers, plain_text

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
    roll.add_argument("--waves", default="1,10%,100%", help="Cumulative wave sizes.")
    roll.add_argument(
        "--abort-failed", default="10%", help="Abort when failed/done exceeds this (N or N%%)."
    )
    roll.add_argument("--min-done", type=int, default=1, help="Finished gateways before aborting.")
    roll.add_argument("--wave-timeout", type=float, default=600.0, metavar="SECONDS")
    roll.add_argument("--expires", type=float, default=30 * 86400.0, metavar="SECONDS")
    roll.add_argument("--insecure", action="store_true", help="Plain-HTTP registry (loopback).")
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


def _rollout(_args: argparse.Namespace) -> int:
    raise CliError("not implemented yet", EXIT_USAGE)


def _status(_args: argparse.Namespace) -> int:
    raise CliError("not implemented yet", EXIT_USAGE)

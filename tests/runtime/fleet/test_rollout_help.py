"""``fleet rollout --help`` names every default an operator relies on (issue 50 item 7):
``--wave-timeout`` and ``--expires`` had none, so nobody knew documents expire in 30 days."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from wasmgate.runtime.cli import build_parser
from wasmgate.runtime.cli._common import SubParsers

REPO = Path(__file__).resolve().parents[3]


def _options(parser: argparse.ArgumentParser, *path: str) -> list[argparse.Action]:
    """The actions of the subcommand at ``path`` (argparse lists them nowhere else)."""
    actions = parser._actions  # noqa: SLF001
    if not path:
        return actions
    (sub,) = [a for a in actions if isinstance(a, SubParsers)]
    return _options(sub.choices[path[0]], *path[1:])


def test_every_option_with_a_value_default_says_it_in_its_help() -> None:
    for action in _options(build_parser(), "fleet", "rollout"):
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            assert action.help, f"{action.dest} has no help"
            shown = action.help % {"default": action.default}
            assert re.search(r"\(default:? ", shown), f"{action.dest}: {shown}"


def test_the_help_as_printed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wasmgate", "fleet", "rollout", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = " ".join(done.stdout.split())
    assert "(default: 600 s, 10 minutes)" in text
    assert "(default: 2592000 s, 30 days). A gateway refuses an expired document" in text


def test_fleet_md_says_how_long_documents_live_and_how_gateways_start() -> None:
    """docs/fleet.md named neither the documents' expiry nor how to start the gateways,
    nor what TRUST_FILE is (issue 50 item 7); the expiry it names is the CLI's default."""
    text = " ".join((REPO / "docs" / "fleet.md").read_text(encoding="utf-8").split())
    (expires,) = [a for a in _options(build_parser(), "fleet", "rollout") if a.dest == "expires"]
    assert expires.default == 30 * 86400
    assert "valid for 30 days (`--expires`, in seconds;" in text
    assert "Start each gateway with its config: `wasmgate serve --config gw-1.toml`" in text
    assert "`TRUST_FILE`: the path of that gateway's trust file" in text

"""Every ```sh block of the user docs is run by a test, or says here why it cannot be.

The docs-as-tests suite reads its commands from the docs themselves (tests/fixtures/
doc_shell.py and the walk-through tests). This file is its inventory: each ```sh block of
README.md, docs/*.md and guest_adapters/README.md, named by its file, the heading above it
and its rank under that heading, maps to the test that runs it verbatim or to the reason
it is not run in CI. A block added without an entry fails here, and so does an entry whose
block is gone or whose test no longer exists or no longer reads that doc.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
DOCS.append("guest_adapters/README.md")
INSTALL = "install line: covered by the install tests (wording owned by the install docs)"

EXAMPLE_HOSTS = (
    "names example hosts an operator replaces; docs/fleet.md's walk-through runs the same "
    "commands against a lab registry and broker"
)
SYNOPSIS = "a usage synopsis with [optional] parts, not a command to run as written"

Block = str
"""``doc > heading [rank]``: the rank-th ```sh block (1-based) under that heading."""

WALKTHROUGH = "tests/guest_adapters/test_mqtt_walkthrough.py::test_mqtt_walkthrough_as_written"
FLEET = "tests/runtime/fleet/test_fleet_walkthrough.py::test_the_walkthrough_runs_as_written"
NINE = "tests/guest_adapters/test_nine_commands.py::test_nine_commands_against_a_running_daemon"
QUICKSTART = "tests/test_readme_install.py::test_readme_first_command_serves_the_demo"
STAGED = "tests/runtime/bundles/test_staged_release_doc.py::test_the_blocks_run_as_written"
KEYS = "tests/runtime/fleet/test_fleet_keys_doc.py::test_the_blocks_run_as_written"
VENV = "tests/deploy/test_venv_doc.py::"
VENV_BLOCKS = "docs/deploy.md > Install elsewhere (a virtual environment)"

RUN: dict[Block, str] = {
    "README.md > Two commands [1]": QUICKSTART,
    "README.md > Try it [1]": WALKTHROUGH,
    **{f"docs/fleet.md > From no keys to a rolled-back group [{n}]": FLEET for n in range(1, 7)},
    **{f"docs/deploy.md > Staged releases [plain {n}]": STAGED for n in (1, 2)},
    **{f"docs/deploy.md > Keys and roles for a fleet [plain {n}]": KEYS for n in (1, 2)},
    "docs/mqtt-topics.md > Try it [1]": WALKTHROUGH,
    f"{VENV_BLOCKS} [plain 1]": f"{VENV}test_the_venv_install_block_runs_and_installs_what_it_says",
    f"{VENV_BLOCKS} [plain 2]": f"{VENV}test_removing_it_takes_exactly_what_the_doc_names",
    "guest_adapters/README.md > Try the demo first [2]": WALKTHROUGH,
    "guest_adapters/README.md > MQTT, with a broker of its own [1]": WALKTHROUGH,
    "guest_adapters/README.md > Make your own adapter (nine commands) [1]": NINE,
}
"""Blocks a test reads from the doc and runs as written (in CI: .ci/run)."""

WHY: dict[Block, str] = {
    "README.md > Two commands [2]": (
        "`bash .ci/run` is CI itself: a test cannot start the run it is part of"
    ),
    "docs/benchmarks.md > Run it [1]": (
        "the full benchmark loads the machine for an hour; its `--quick` line is what "
        "tests/bench/test_bench_quick.py runs in CI"
    ),
    "docs/benchmarks.md > Soak: an hour of mixed traffic under faults [1]": (
        "the 60-minute line is the published figures' run; the 2-minute line is CI's, run "
        "verbatim by tests/bench/test_soak.py"
    ),
    "docs/benchmarks.md > A fleet of 10,000 gateways, simulated [1]": (
        "the 10,000-gateway line is the published figures' run (both CPUs for ~10 minutes); "
        "the 60-gateway line is CI's, run verbatim by tests/bench/test_fleet_sim.py"
    ),
    "docs/grpc.md > Examples [1]": (
        "install line from PyPI (no downloads at test time); the test extra installs the "
        "same tritonclient, which the gRPC tests drive"
    ),
    "docs/grpc.md > Examples [2]": (
        "installs system and PyPI packages (no downloads at test time); its pins are "
        "bench.peers' (tests/bench/test_perf_analyzer_doc.py), whose perf_analyzer "
        "tests/bench/test_bench_grpc.py drives against a real daemon"
    ),
    "guest_adapters/README.md > Try the demo first [1]": INSTALL,
    "guest_adapters/README.md > tritonclient in five lines [1]": INSTALL,
    "guest_adapters/README.md > Building by hand [1]": (
        "needs the `sdk` extra (ziglang); `wasmgate adapter build`, which the nine commands "
        "run, wraps the same compiler call"
    ),
    # Blocks without a language that CI does not run as written (deploy.md's staged
    # releases and fleet keys are in RUN).
    "docs/CONTRIBUTING.md > Dev loop [plain 1]": (
        "the contributors' own setup; .ci/run makes the same editable install and dev-link"
    ),
    "docs/CONTRIBUTING.md > Example adapters ship prebuilt [plain 1]": (
        "rebuilds the shipped modules with the `sdk` extra; the sealed test checks they are current"
    ),
    **{
        f"docs/deploy.md > Install on Debian 12 or Raspberry Pi OS 64-bit (the package) [plain {n}]": INSTALL  # noqa: E501
        for n in (1, 2, 3)
    },
    "docs/deploy.md > Versions, upgrades and going back [plain 1]": INSTALL,
    "docs/deploy.md > Versions, upgrades and going back [plain 2]": INSTALL,
    "docs/openvino.md > Install: a documented extra venv [1]": (
        ".ci/openvino-setup takes the same steps with the checkout installed editable "
        "(tests/runtime/openvino/test_install_doc.py holds the two in step), and "
        "tests/runtime/openvino runs daemons from that venv"
    ),
    "docs/deploy.md > Bundles from an OCI registry (`bundle push`/`pull`) [plain 1]": EXAMPLE_HOSTS,
    "docs/fleet.md > Rolling out a bundle [plain 1]": EXAMPLE_HOSTS,
    "docs/fleet.md > Watching the fleet [plain 1]": EXAMPLE_HOSTS,
    "docs/operator.md > `wasmgate doctor` [plain 1]": SYNOPSIS,
    "docs/operator.md > Hard examples kept for retraining [plain 1]": SYNOPSIS,
}
"""Blocks CI does not run as written, each with the reason."""


COMMAND = re.compile(
    r"^(wasmgate|apt|pip|python3?|curl|sudo|install|bash|sh|systemctl|deploy/\S+) "
)
"""A block without a language is a command block when its first line starts a command."""


def sh_blocks() -> list[Block]:
    """Every ```sh block of the user docs, and every unlabeled block of commands
    (``[plain N]``), in document order."""
    found: list[Block] = []
    for doc in DOCS:
        heading, ranks, fence, first = "", dict[str, int](), None, False
        for line in (REPO / doc).read_text(encoding="utf-8").splitlines():
            if fence is None and line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif line.startswith("```"):
                fence, first = (line[3:].strip(), True) if fence is None else (None, False)
                if fence == "sh":
                    ranks[heading] = ranks.get(heading, 0) + 1
                    found.append(f"{doc} > {heading} [{ranks[heading]}]")
            elif fence == "" and first:
                first = False
                if COMMAND.match(line):
                    key = f"plain {heading}"
                    ranks[key] = ranks.get(key, 0) + 1
                    found.append(f"{doc} > {heading} [plain {ranks[key]}]")
            else:
                first = False
    return found


def test_every_block_is_run_or_says_why() -> None:
    blocks = sh_blocks()
    assert not set(RUN) & set(WHY), "a block is either run or excused, never both"
    missing = [b for b in blocks if b not in RUN and b not in WHY]
    assert not missing, f"sh blocks neither run by a test nor listed with a reason: {missing}"
    stale = [b for b in (*RUN, *WHY) if b not in blocks]
    assert not stale, f"listed blocks the docs no longer have: {stale}"


@pytest.mark.parametrize("block", sorted(RUN))
def test_the_named_test_exists_and_reads_the_doc(block: Block) -> None:
    file, _, name = RUN[block].partition("::")
    source = (REPO / file).read_text(encoding="utf-8")
    assert re.search(rf"^def {re.escape(name)}\(", source, re.MULTILINE), RUN[block]
    doc, _, rest = block.partition(" > ")
    heading = rest.rsplit(" [", 1)[0]
    assert Path(doc).name in source, f"{file} does not read {doc}"
    assert heading in source, f"{file} does not name the heading {heading!r}"


def test_every_reason_is_a_sentence() -> None:
    for block, why in WHY.items():
        assert len(why.split()) >= 5, block

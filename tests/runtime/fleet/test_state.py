"""``<state_dir>/fleet.json``: written and read back as it was, and a damaged file is refused
by name (it holds the replay floor, so it is never silently reset)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.fleet.state import FleetRecord, FleetStateFile, Plan, Want

WANT = {"name": "probe", "version": 2, "ref": "h:5000/probe@sha256:ab", "staged_percent": 10}
PLAN = {"serial": 3, "bundles": [WANT], "downgrades": {"probe": 1}}
FULL = {"serial": 3, "plan": PLAN, "envelope": "aGk=", "owned": ["probe"]}


def _record() -> FleetRecord:
    want = Want(name="probe", version=2, ref="h:5000/probe@sha256:ab", staged_percent=10)
    plan = Plan(serial=3, bundles=(want,), downgrades={"probe": 1})
    return FleetRecord(serial=3, plan=plan, envelope="aGk=", owned=("probe",))


def test_first_start_is_an_empty_record(tmp_path: Path) -> None:
    assert FleetStateFile(tmp_path).load() == FleetRecord()


def test_saved_as_indented_json_and_read_back_equal(tmp_path: Path) -> None:
    file = FleetStateFile(tmp_path / "state")
    file.save(_record())
    text = file.path.read_text()
    assert json.loads(text) == FULL
    assert text == json.dumps(FULL, indent=1)  # the layout pydantic wrote: old files diff clean
    assert file.load() == _record()
    assert file.load().envelope_bytes() == b"hi"


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b'{"serial": 3', r"not valid JSON: "),
        (b"\xff\xfe", r"not valid JSON: "),
        (b'{"serial": NaN}', r"not valid JSON: "),
        (b"", r"not valid JSON: "),
        (b"[]", r"document: Expected `object`, got `array`"),
        (b'{"serial": "three"}', r"serial: Expected `int \| null`"),
        (b'{"serial": true}', r"serial: Expected `int \| null`, got `bool`"),
        (b'{"owned": "probe"}', r"owned: Expected `array`, got `str`"),
        (json.dumps({**FULL, "floor": 1}).encode(), r"floor: unknown field"),
        (json.dumps({"plan": {**PLAN, "x": 1}}).encode(), r"plan\.x: unknown field"),
        (
            json.dumps({"plan": {**PLAN, "serial": 0}}).encode(),
            r"plan\.serial: Expected `int` >= 1",
        ),
        (
            json.dumps({"plan": {**PLAN, "bundles": [{**WANT, "staged_percent": 101}]}}).encode(),
            r"plan\.bundles\.0\.staged_percent: Expected `int` <= 100",
        ),
        (
            json.dumps({"plan": {**PLAN, "bundles": [{**WANT, "version": -1}]}}).encode(),
            r"plan\.bundles\.0\.version: Expected `int` >= 0",
        ),
        (
            json.dumps({"plan": {"bundles": []}}).encode(),
            r"plan: Object missing required field `serial`",
        ),
    ],
)
def test_a_damaged_file_is_refused_naming_the_file(
    tmp_path: Path, content: bytes, what: str
) -> None:
    file = FleetStateFile(tmp_path)
    file.path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        file.load()
    message = str(refused.value)
    assert message.startswith(f"{file.path}: fleet state damaged (")
    assert "it holds the replay floor" in message
    assert re.match(what, message.split("fleet state damaged (", 1)[1]), message


def test_numbers_as_text_are_read_as_before(tmp_path: Path) -> None:
    # The record was always read leniently (pydantic's default); a hand-edited "3" still reads.
    file = FleetStateFile(tmp_path)
    file.path.write_text(json.dumps({"serial": "3", "owned": []}))
    assert file.load().serial == 3


def test_an_unreadable_file_is_not_a_damaged_one(tmp_path: Path) -> None:
    file = FleetStateFile(tmp_path)
    file.path.mkdir()
    with pytest.raises(ConfigError, match="cannot read the fleet state"):
        file.load()

"""The fleet's durable facts in the state dir: ``<state_dir>/fleet.json``.

- ``serial``: the serial of the last *accepted* document. It is written before the apply
  starts, so a SIGKILL in the middle never lets an older document back in (the replay
  floor never goes down), and the plan it carries is resumed at the next start.
- ``plan``: what that document asked for (already verified; resuming needs no re-check, so
  a document that expires while the gateway is off still finishes its apply).
- ``envelope``: the signed bytes as received (``GET /v1/desired`` shows them).
- ``owned``: bundle names the fleet installed. Only these are ever removed by the fleet;
  every other serving bundle is the operator's (``local``).

Written with `atomic_write` (temp, fsync, rename): a crash leaves the old or the new file.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from wasmgate.runtime.errors import ConfigError
from wasmgate.signing.envelope import EnvelopeFormatError, loads_strict, parse_envelope
from wasmgate.signing.state import atomic_write
from wasmgate.typed import Document, Invalid, convert, plain

log = logging.getLogger("wasmgate.fleet")

FILE_NAME = "fleet.json"


# The bounds (Meta) hold when a record is read (`convert`), not when one is built: the plans
# built here come from verified fleet documents, whose own bounds are narrower.
class Want(Document, kw_only=True):
    """One bundle a fleet document asks for."""

    name: str
    version: Annotated[int, Meta(ge=0)]
    ref: str
    """``HOST:PORT/REPO@sha256:<manifest digest>``."""
    staged_percent: Annotated[int, Meta(ge=1, le=100)] | None = None

    @property
    def digest(self) -> str:
        """The OCI manifest digest of ``ref`` (what the report shows)."""
        return self.ref.rpartition("@")[2]

    @property
    def percent(self) -> int:
        return self.staged_percent if self.staged_percent is not None else 100


class Plan(Document, kw_only=True):
    """A verified fleet document, reduced to what the reconciler acts on."""

    serial: Annotated[int, Meta(ge=1)]
    bundles: tuple[Want, ...] = ()
    downgrades: dict[str, int] = msgspec.field(default_factory=dict)
    """Bundle name -> the one lower version the document permits."""


class FleetRecord(Document, kw_only=True):
    serial: int | None = None
    plan: Plan | None = None
    envelope: str | None = None
    """Base64 of the signed document bytes."""
    owned: tuple[str, ...] = ()

    def envelope_bytes(self) -> bytes | None:
        return base64.b64decode(self.envelope) if self.envelope is not None else None


class FleetStateFile:
    """Reads and replaces ``fleet.json``; the reconciler is its only writer."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME

    def load(self) -> FleetRecord:
        """The record, or an empty one on first start. A damaged file stops the daemon:
        starting without the serial floor would accept replayed documents."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return FleetRecord()
        except OSError as e:
            raise ConfigError(f"{self.path}: cannot read the fleet state: {e}") from e
        try:
            # msgspec's JSON parser, like pydantic's before it, refuses NaN and invalid UTF-8.
            obj = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError) as e:
            raise self._damaged(f"not valid JSON: {e}") from e
        try:
            # Lenient (strict=False) as the record always was read: "serial": "3" is 3.
            return convert(obj, FleetRecord, strict=False)
        except Invalid as e:
            raise self._damaged(str(e)) from e

    def _damaged(self, what: str) -> ConfigError:
        return ConfigError(
            f"{self.path}: fleet state damaged ({what}); it holds the replay floor, so it is "
            "not reset on its own: restore it or delete it knowingly"
        )

    def save(self, record: FleetRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(plain(record), indent=1, ensure_ascii=False)  # as pydantic wrote it
        atomic_write(self.path, text.encode())


def encode_envelope(data: bytes) -> str:
    return base64.b64encode(data).decode()


def peek_serial(data: bytes) -> int | None:
    """The ``serial`` a document claims, read *without* verifying it (to choose among the
    group documents and to label a refusal); None when it cannot be read."""
    try:
        payload = loads_strict(parse_envelope(data).payload_bytes())
    except EnvelopeFormatError:
        return None
    serial = payload.get("serial")
    return serial if isinstance(serial, int) and not isinstance(serial, bool) else None

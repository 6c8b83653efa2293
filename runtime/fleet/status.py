"""What the operator side reads from the broker: deployment reports and desired documents.

Reports (``<prefix>/<gateway>/deployment``, format ``wasmgate-deployment/1``) are parsed
leniently: unknown fields are ignored (a newer daemon may add some) and a report that does
not parse is shown as unreadable instead of stopping the listing of every other gateway.
Desired documents are decoded here *without* checking their signatures: the status is a
view, and a gateway verifies every document itself. Drift = the fleet-managed bundles a
gateway reports differ from the document that applies to it (its own, else the highest
serial among its groups').
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec

from wasmgate.signing.envelope import EnvelopeFormatError, parse_envelope
from wasmgate.signing.errors import FleetFormatError
from wasmgate.signing.fleetdoc import FleetDoc, parse_fleet
from wasmgate.typed import convert, plain

REPORT_FORMAT = "wasmgate-deployment/1"
FINAL = frozenset({"applied", "failed"})


class _Lenient(msgspec.Struct, frozen=True, kw_only=True):
    """Unknown fields ignored (not `Document`): other gateways may run a newer daemon.

    Subclasses repeat both options: msgspec applies ``kw_only`` to a class's own fields only,
    and mypy does not carry ``frozen`` over to a subclass."""


class BundleReport(_Lenient, frozen=True, kw_only=True):
    """One bundle of a report: the version a gateway runs (or tries) and how that went."""

    version: int | None = None
    digest: str | None = None
    state: str | None = None  # null before any document
    error: str | None = None
    staged_percent: int | None = None


class Refusal(_Lenient, frozen=True, kw_only=True):
    serial: int | None = None
    error: str = ""


class LastFailure(_Lenient, frozen=True, kw_only=True):
    """The last bundle a document failed to apply (kept after a rollback applied)."""

    serial: int | None = None
    bundle: str = ""
    version: int | None = None
    error: str = ""
    at: datetime | None = None


class Report(_Lenient, frozen=True, kw_only=True):
    """A gateway's retained deployment report."""

    format: Literal["wasmgate-deployment/1"]
    gateway: str
    groups: list[str] = msgspec.field(default_factory=list)
    serial: int | None = None
    state: str | None = None  # null before any document
    reason: str | None = None
    refused: Refusal | None = None
    last_failure: LastFailure | None = None
    bundles: dict[str, BundleReport] = msgspec.field(default_factory=dict)
    time: datetime | None = None

    def shown_state(self) -> str:
        """``state``, except that a gateway whose last rollout failed and was rolled back
        reads ``failed, rolled back``, not ``applied`` (its previous bundles serve)."""
        if self.state == "applied" and self.last_failure is not None:
            return "failed, rolled back"
        return self.state or "-"

    def problems(self) -> list[str]:
        """Every failure and refusal of this gateway, each with its whole reason."""
        out = []
        if self.state in ("failed", "pending") and self.reason:
            out.append(f"serial {self.serial} {self.state}: {self.reason}")
        fail = self.last_failure
        if fail is not None and not (self.state == "failed" and fail.serial == self.serial):
            out.append(
                f"serial {fail.serial} failed ({fail.bundle} v{fail.version}), rolled back: "
                f"{fail.error}"
            )
        if self.refused is not None:
            out.append(f"serial {self.refused.serial} refused: {self.refused.error}")
        return out

    def fleet_versions(self) -> dict[str, int | None]:
        """name -> version of the bundles the fleet manages here (not local, not removed)."""
        return {
            n: b.version for n, b in self.bundles.items() if b.state not in {"local", "removed"}
        }


def parse_report(payload: bytes) -> Report | None:
    """The report, or None when the payload is empty (cleared) or not a report."""
    if not payload:
        return None
    try:
        # Lenient (strict=False) as reports always were read: ``"serial": "3"`` is 3.
        return convert(json.loads(payload), Report, strict=False)
    except (ValueError, RecursionError):  # `Invalid` is a ValueError too
        return None


def decode_desired(payload: bytes) -> FleetDoc | None:
    """The document inside a signed envelope, unverified (display and drift only)."""
    if not payload:
        return None
    try:
        return parse_fleet(parse_envelope(payload).payload_bytes())
    except (EnvelopeFormatError, FleetFormatError):
        return None


@dataclass(frozen=True)
class Desired:
    """A desired document as retained (``raw``, the signed envelope) and as decoded."""

    doc: FleetDoc
    raw: bytes


@dataclass(frozen=True)
class FleetView:
    """Everything retained under one prefix, split by kind of topic."""

    reports: dict[str, Report]
    unreadable: list[str]
    group_docs: dict[str, Desired]
    gateway_docs: dict[str, Desired]

    def members(self, group: str | None) -> list[Report]:
        """Reports of the gateways in ``group`` (every gateway when None), by name."""
        picked = [r for r in self.reports.values() if group is None or group in r.groups]
        return sorted(picked, key=lambda r: r.gateway)

    def desired_for(self, report: Report) -> Desired | None:
        """The document that applies to the gateway: its own, else its groups' newest."""
        own = self.gateway_docs.get(report.gateway)
        if own is not None:
            return own
        docs = [self.group_docs[g] for g in report.groups if g in self.group_docs]
        return max(docs, key=lambda d: d.doc.serial, default=None)

    def drift(self, report: Report) -> bool | None:
        """True when the reported bundles differ from the desired ones; None: no document."""
        desired = self.desired_for(report)
        if desired is None:
            return None
        wanted: dict[str, int | None] = {b.name: b.version for b in desired.doc.bundles}
        states = {n: b.state for n, b in report.bundles.items()}
        return report.fleet_versions() != wanted or any(states.get(n) != "applied" for n in wanted)


def split_topics(prefix: str, messages: Mapping[str, bytes]) -> FleetView:
    """Sort retained messages under ``prefix`` into reports and desired documents."""
    root = prefix.rstrip("/") + "/"
    view = FleetView({}, [], {}, {})
    for topic, payload in messages.items():
        if not topic.startswith(root) or not payload:
            continue
        levels = topic[len(root) :].split("/")
        if len(levels) == 2 and levels[1] == "deployment":
            report = parse_report(payload)
            if report is None or report.gateway != levels[0]:
                view.unreadable.append(levels[0])  # a report claiming another name too
            else:
                view.reports[levels[0]] = report
        elif len(levels) == 2 and levels[1] == "desired":
            _put(view.gateway_docs, levels[0], payload)
        elif len(levels) == 3 and levels[0] == "fleet" and levels[2] == "desired":
            _put(view.group_docs, levels[1], payload)
    return view


def _put(into: dict[str, Desired], key: str, payload: bytes) -> None:
    doc = decode_desired(payload)
    if doc is not None:
        into[key] = Desired(doc, payload)


def status_json(view: FleetView, group: str | None) -> dict[str, Any]:
    """The ``fleet status --json`` document."""
    gateways = []
    for r in view.members(group):
        entry = plain(r)
        entry["drift"] = view.drift(r)
        gateways.append(entry)
    desired = {
        g: plain(d.doc) for g, d in sorted(view.group_docs.items()) if group is None or g == group
    }
    return {"gateways": gateways, "desired": desired, "unreadable": sorted(view.unreadable)}


def render_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain text table: columns padded to their widest cell, two spaces apart."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=False)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )


def _cell(b: BundleReport | None) -> str:
    if b is None:
        return "-"
    version = "?" if b.version is None else f"v{b.version}"
    return version if b.state == "applied" else f"{version} {b.state or '?'}"


def status_table(view: FleetView, group: str | None) -> str:
    """The ``fleet status`` table: one row per gateway, one column per bundle name."""
    members = view.members(group)
    names = sorted({n for r in members for n in r.bundles})
    headers = ["gateway", "state", "serial", "last seen", "drift", *names]
    rows = []
    for r in members:
        drift = {True: "yes", False: "no", None: "-"}[view.drift(r)]
        seen = r.time.strftime("%Y-%m-%d %H:%M:%SZ") if r.time else "-"
        serial = "-" if r.serial is None else str(r.serial)
        rows.append(
            [
                r.gateway,
                r.shown_state(),
                serial,
                seen,
                drift,
                *(_cell(r.bundles.get(n)) for n in names),
            ]
        )
    rows += [
        [g, "unreadable report", "-", "-", "-", *("-" for _ in names)] for g in view.unreadable
    ]
    return render_table(headers, rows) + problem_lines(
        (r.gateway, p) for r in members for p in r.problems()
    )


def problem_lines(problems: Iterable[tuple[str, str]]) -> str:
    """Below a table, one line per gateway's problem with its whole reason (a table cell
    would cut it, and the hint is at its end)."""
    lines = [f"{gateway}: {' '.join(text.split())}" for gateway, text in problems]
    return "\n\n" + "\n".join(lines) if lines else ""

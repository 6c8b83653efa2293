"""Operator variables: site values for the params a bundle declares overridable.

Three layers, the first that has a value wins: the operator's (management API or MQTT,
persisted as ``variables.json`` in the state dir), the config's ``[variables.<bundle>]``,
the manifest's default. The guest reads the result through ``param.<name>`` like any
signed param (``LoadedBundle.params`` is replaced as a whole, so a request sees one set).

Invariants:
- Only names the serving (and staged) versions declare under ``[variables]`` can be set;
  a signed param not declared there is refused by name, so it never changes.
- Every value passes `wasmgate.signing.variables.Variable.check` for every version that
  will read it; one refused value refuses the whole update, and nothing changes.
- A config or persisted value that a newly loaded version no longer accepts is skipped
  with a log line (the default applies); it is not deleted, an older version may use it.
- The file is replaced atomically (write, fsync, rename), so a crash keeps the old or the
  new set, never a torn one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BadRequest, DaemonError, NotFound
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.variables import Variable, VariableError
from wasmgate.typed import plain

log = logging.getLogger("wasmgate.variables")

FILE_NAME = "variables.json"
MAX_DOCUMENT = 64 * 1024
Value = bool | int | float | str
Values = dict[str, Value]


def render(value: object) -> str:
    """A param as the guest reads it: TOML/JSON booleans are "true"/"false"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Variables:
    """Owner of the operator layer; computes what each loaded version's guest sees."""

    def __init__(self, path: Path, configured: Mapping[str, Mapping[str, Value]]) -> None:
        """Read the persisted operator values of ``path`` (missing: none)."""
        self._path = path
        self._configured = {b: dict(v) for b, v in configured.items()}
        self._operator: dict[str, Values] = _read(path)
        self._logged: set[tuple[str, str]] = set()
        self.last_refusal: str | None = None
        """Why the last update was refused (shown in status: MQTT has no answer)."""
        self.last_refusal_at: float | None = None
        """When (POSIX time): the status page dates the refusal."""
        self.on_document: list[Callable[[bytes], None]] = []
        """Called with each MQTT document applied (a supervisor passes it to its workers)."""

    def reconfigure(
        self, table: ServingTable, configured: Mapping[str, Mapping[str, Value]]
    ) -> list[str]:
        """A new config layer (SIGHUP): every loaded version's params are computed again, at
        once. Values the declarations refuse are skipped and logged, as at start (the
        operator and signed layers are untouched). Returns the bundles whose layer changed."""
        new = {b: dict(v) for b, v in configured.items()}
        changed = sorted(b for b in new.keys() | self._configured.keys()
                         if new.get(b) != self._configured.get(b))  # fmt: skip
        self._configured = new
        self._logged.clear()  # a value skipped before may be skipped again: say so again
        for name in changed:
            for version in table.slot(name).versions() if name in table.slots() else ():
                version.params = self.params(name, version.signed_params, version.declared)
        if changed:
            log.info("config variables reloaded", extra={"bundles": changed})
        return changed

    def params(
        self, bundle: str, signed: Mapping[str, Value], declared: Mapping[str, Variable]
    ) -> dict[str, str]:
        """The params one version's guest reads: signed values, then each variable's value."""
        out = {k: render(v) for k, v in signed.items()}
        out.update({k: render(v) for k, v in self.values(bundle, signed, declared).items()})
        return out

    def values(
        self, bundle: str, signed: Mapping[str, Value], declared: Mapping[str, Variable]
    ) -> Values:
        """Each declared variable's effective value (unusable layers skipped, logged)."""
        return {n: self._resolve(bundle, n, v, signed)[0] for n, v in declared.items()}

    def describe(self, bundle: LoadedBundle) -> dict[str, Any]:
        """Per variable: value, where it came from, default and declaration (status, GET)."""
        out: dict[str, Any] = {}
        for name, var in bundle.declared.items():
            value, source = self._resolve(bundle.name, name, var, bundle.signed_params)
            out[name] = {
                "value": value,
                "source": source,
                "default": _default(name, var, bundle.signed_params),
                **{k: v for k, v in plain(var, omit_none=True).items() if k != "default"},
            }
        return out

    def update(self, versions: Iterable[LoadedBundle], values: Mapping[str, object]) -> None:
        """Set (``None``: clear) operator values of one bundle; BadRequest changes nothing."""
        targets = list(versions)
        try:
            checked = check_update(targets, values)
        except DaemonError as e:
            self.last_refusal, self.last_refusal_at = str(e), time.time()
            raise
        name = targets[0].name
        merged = {**self._operator.get(name, {}), **checked}
        for key in [k for k, v in values.items() if v is None]:
            merged.pop(key, None)
        operator = {**self._operator, name: merged}
        if not merged:
            operator.pop(name)
        _write(self._path, operator)
        self._operator = operator
        for version in targets:
            version.params = self.params(name, version.signed_params, version.declared)
        log.info("variables set", extra={"bundle": name, "variables": sorted(values)})

    def update_many(
        self, changes: Mapping[str, tuple[list[LoadedBundle], Mapping[str, object]]]
    ) -> None:
        """Several bundles' updates, all or nothing (one MQTT document)."""
        for versions, values in changes.values():
            check_update(versions, values)
        for versions, values in changes.values():
            self.update(versions, values)

    def apply_document(self, table: ServingTable, payload: bytes) -> bool:
        """Apply ``{"<bundle>": {"name": value}}`` (MQTT); False (logged) if refused.

        An empty payload (the retained document was cleared) changes nothing."""
        if not payload:
            return True
        try:
            if len(payload) > MAX_DOCUMENT:
                raise BadRequest(f"document over {MAX_DOCUMENT} bytes")
            doc = json.loads(payload)
            if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
                raise BadRequest('want a JSON object {"<bundle>": {"<name>": value}}')
            self.update_many({b: (table.slot(b).versions(), v) for b, v in doc.items()})
        except (ValueError, RecursionError, DaemonError) as e:
            self.last_refusal, self.last_refusal_at = f"mqtt: {e}", time.time()
            log.error("variables refused, nothing changed: %s", e)  # noqa: TRY400
            return False
        for hook in self.on_document:
            hook(payload)
        return True

    def status(self, table: ServingTable) -> dict[str, Any]:
        """Each serving bundle's variables, and the last refusal."""
        bundles = {n: self.describe(s.current) for n, s in sorted(table.slots().items())}
        return {
            "bundles": {n: v for n, v in bundles.items() if v},
            "last_refusal": self.last_refusal,
            "last_refusal_at": self.last_refusal_at,
        }

    def _resolve(
        self, bundle: str, name: str, var: Variable, signed: Mapping[str, Value]
    ) -> tuple[Value, str]:
        for source, layer in (("operator", self._operator), ("config", self._configured)):
            if name in layer.get(bundle, {}):
                try:
                    return var.check(name, layer[bundle][name]), source
                except VariableError as e:
                    self._skipped(source, bundle, str(e))
        return _default(name, var, signed), "default"

    def _skipped(self, source: str, bundle: str, why: str) -> None:
        """Log a skipped value once: status polls resolve the same values every 2 s."""
        if (bundle, why) not in self._logged:
            self._logged.add((bundle, why))
            log.error("%s variable of %s skipped, default kept: %s", source, bundle, why)


def _default(name: str, var: Variable, signed: Mapping[str, Value]) -> Value:
    value = var.default if var.default is not None else signed[name]
    return var.check(name, value)


def check_update(versions: list[LoadedBundle], values: Mapping[str, object]) -> Values:
    """The values (``None`` entries left out) if every version accepts them; BadRequest."""
    if not versions:
        raise NotFound("no such bundle")
    if not values:
        raise BadRequest("no variables given")
    out: Values = {}
    for key, value in values.items():
        for version in versions:
            var = version.declared.get(key)
            if var is None:
                raise BadRequest(_undeclared(version, key))
            if value is not None:
                try:
                    out[key] = var.check(key, value)
                except VariableError as e:
                    raise BadRequest(f"{version.name}: variable {e}") from e
    return out


def _undeclared(bundle: LoadedBundle, key: str) -> str:
    if key in bundle.signed_params:
        return f"{bundle.name}: param {key!r} is signed and not declared overridable"
    declared = ", ".join(sorted(bundle.declared)) or "none"
    return f"{bundle.name}: no variable {key!r} is declared (declared: {declared})"


def _read(path: Path) -> dict[str, Values]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.error("operator variables unreadable, using none: %s", e)  # noqa: TRY400
        return {}
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        log.error("operator variables file %s is not {bundle: {name: value}}", path)
        return {}
    return {str(b): dict(v) for b, v in doc.items()}


def _write(path: Path, doc: Mapping[str, Values]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Per process: a gateway's workers apply the retained MQTT document at the same moment.
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        f.write(json.dumps(doc, indent=1, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)

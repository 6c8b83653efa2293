"""The checks of ``wasmgate doctor`` that need no network: config, paths, trust, bundles,
device profile, clock and the systemd unit. Each returns `Finding`s; none changes anything
on disk (the trust file is read without pinning, bundles are verified, not installed)."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from wasmgate._compat import UTC
from wasmgate.runtime.bundles.watcher import bundle_files
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.unit import DEFAULT_CONFIG, current_executable, unit_path_problems
from wasmgate.signing import SigningError, StateFile, TrustStore, inspect_bundle, verify_bundle
from wasmgate.signing.errors import (
    BundleTooLargeError,
    ExpiredError,
    FutureIssuedError,
    KeyScopeError,
    LimitCeilingError,
    RevokedBundleError,
    RevokedKeyError,
    RollbackError,
    UntrustedKeyError,
)
from wasmgate.signing.scope import claimed_names
from wasmgate.signing.state import StateDoc

Level = Literal["ok", "skip", "warn", "error"]
EXIT_CODES: dict[Level, int] = {"ok": 0, "skip": 0, "warn": 1, "error": 2}
# Where systemd loads the unit from, first match wins: the operator's own (`serve
# --print-unit > ...`), then the Debian package's (/lib is /usr/lib on merged-/usr systems).
UNIT_PATHS = tuple(
    Path(d, "wasmgate.service")
    for d in ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
)
_EXPIRY_WARN = timedelta(days=14)


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, how it went, and what to do about it."""

    check: str
    level: Level
    message: str
    fix: str = ""


def check_data_dir(settings: Settings) -> Iterator[Finding]:
    paths = settings.paths
    for key, path in (
        ("data_dir", paths.data_dir),
        ("bundle_dir", paths.resolved("bundle_dir")),
        ("state_dir", paths.resolved("state_dir")),
        ("cache_dir", paths.resolved("cache_dir")),
    ):
        yield _dir_finding(key, path)


def _dir_finding(key: str, path: Path) -> Finding:
    check = f"paths: {key.replace('_', ' ')}"
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), Path("/"))
        if os.access(parent, os.W_OK):
            return Finding(check, "ok", f"{path} does not exist yet (created at first start)")
        return Finding(
            check,
            "error",
            f"{path} is missing and {parent} is not writable",
            f"mkdir -p {path} and give it to the daemon's user",
        )
    if not path.is_dir():
        return Finding(
            check, "error", f"{path} is not a directory", f"move it aside, or set paths.{key}"
        )
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return Finding(
            check,
            "error",
            f"{path} is not writable by uid {os.geteuid()}",
            f"chown the directory to the daemon's user: chown -R USER {path}",
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & stat.S_IWOTH:
        return Finding(
            check,
            "error",
            f"{path} is writable by everyone ({mode:o})",
            f"chmod o-w {path}: anyone could drop bundles or edit state",
        )
    return Finding(check, "ok", f"{path} ({mode:o}, writable)")


def load_trust_readonly(settings: Settings) -> tuple[TrustStore | None, Finding]:
    path = settings.paths.resolved_trust_file()
    try:
        trust = TrustStore.load(path, missing_ok=True)  # no pin_dir: the doctor writes nothing
    except SigningError as e:
        return None, Finding("trust file", "error", str(e), "fix or replace the trust file")
    signers = trust.doc.signers
    if not signers:
        return trust, Finding(
            "trust file",
            "warn",
            f"{path}: trusts no signer, every bundle will be refused",
            "wasmgate trust add KEY.pub --names NAME",
        )
    names = "; ".join(f"{k[:16]} for {', '.join(s.names)}" for k, s in sorted(signers.items()))
    return trust, Finding("trust file", "ok", f"{path}: {len(signers)} signers ({names})")


def check_bundles(settings: Settings, trust: TrustStore | None) -> Iterator[Finding]:
    files = bundle_files(settings.paths.resolved("bundle_dir"))
    if not files:
        yield Finding("bundles", "ok", "no bundle files in the bundle directory")
        return
    if trust is None:
        yield Finding("bundles", "skip", "not verified: the trust file is unusable")
        return
    try:
        state = StateFile(settings.paths.resolved("state_dir")).load()
    except SigningError as e:
        fix = "restore state.json in the state dir from a backup (the daemon will not start on it)"
        yield Finding("bundles", "error", f"anti-rollback state: {e}", fix)
        return
    for path in files:
        yield _bundle_finding(path, trust, state, settings.limits.max_bundle_bytes)


def _bundle_finding(path: Path, trust: TrustStore, state: StateDoc | None, cap: int) -> Finding:
    check = f"bundle {path.name}"
    try:
        v = verify_bundle(path, trust, max_bundle_bytes=cap, state=state)
    except RollbackError as e:
        return Finding(
            check,
            "warn",
            f"older than the installed version: {e}",
            f"delete {path} (it is skipped at every start)",
        )
    except SigningError as e:
        return Finding(check, "error", f"refused: {e}", refusal_fix(e, path, trust, cap))
    left = v.manifest.expires - datetime.now(UTC)
    if left < _EXPIRY_WARN:
        return Finding(check, "warn", f"{v.manifest.label()} expires in {left.days} days", _REBUILD)

    return Finding(check, "ok", f"{v.manifest.label()} signed by {v.key_id[:16]}, verifies")


_REBUILD = (
    "build it again with a higher version (a bundle expires 90 days after it is built "
    "unless --expires says otherwise): wasmgate bundle build DIR --key KEY --version N --out FILE"
)


def refusal_fix(e: SigningError, path: Path, trust: TrustStore, cap: int) -> str:
    """What to do about a refused bundle file, as a command where there is one."""
    names, signer = _claims(path, cap)
    if isinstance(e, UntrustedKeyError):
        return (
            f"trust the public key of its signer {signer[:16]} for its names (the daemon "
            f"picks it up by itself): wasmgate trust add KEY.pub {_names(names)}"
        )
    if isinstance(e, KeyScopeError):
        entry = trust.doc.signers.get(signer)
        old = [n for n in (entry.names if entry else ()) if n not in names]
        return (
            f"let key {signer[:16]} sign these names too: "
            f"wasmgate trust add KEY.pub {_names([*old, *names])}"
        )
    return _FIXES.get(type(e), f"build and sign it again, or delete {path}")


_FIXES: dict[type[SigningError], str] = {
    ExpiredError: _REBUILD,
    RevokedKeyError: "its key is revoked: sign it again with another trusted key",
    RevokedBundleError: "this bundle is revoked: build a new version (raise `version`)",
    FutureIssuedError: "sync the clock: timedatectl set-ntp true",
    LimitCeilingError: "lower the bundle's [limits], or trust its key with a higher "
    "--max-limit (wasmgate trust add KEY.pub --names NAME --max-limit memory_mb=N)",
    BundleTooLargeError: "raise limits.max_bundle_bytes, or make the bundle smaller",
}


def _names(names: list[str]) -> str:
    """``--names`` options as a shell reads them (a pattern's ``*`` quoted)."""
    return " ".join(f"--names {shlex.quote(n)}" for n in names) or "--names NAME"


def _claims(path: Path, cap: int) -> tuple[list[str], str]:
    """The names a bundle claims (what its key must be trusted for) and its first signer's
    key id, read without verifying; nothing when the file cannot be read that far."""
    try:
        info = inspect_bundle(path, max_bundle_bytes=cap)
    except SigningError:
        return [], ""
    names = list(dict.fromkeys(name for _, name in claimed_names(info.manifest)))
    return names, (info.key_ids[0] if info.key_ids else "")


def check_clock(settings: Settings) -> Finding:
    """Expiry and issue times are checked against this clock: a gateway without RTC that
    booted without NTP is years behind and refuses every bundle as not yet valid."""
    now = datetime.now(UTC)
    newest, what = _newest_signing_time(settings)
    if newest is not None and newest - now > timedelta(minutes=5):
        return Finding(
            "clock",
            "error",
            f"the clock ({now:%Y-%m-%d %H:%M} UTC) is behind {what} "
            f"({newest:%Y-%m-%d %H:%M} UTC): bundles look not yet valid",
            "sync the clock: timedatectl set-ntp true",
        )
    built = datetime.fromtimestamp(Path(__file__).stat().st_mtime, UTC)
    if built - now > timedelta(days=1):
        return Finding(
            "clock",
            "warn",
            f"the clock ({now:%Y-%m-%d}) is before this wasmgate was installed ({built:%Y-%m-%d})",
            "sync the clock: timedatectl set-ntp true",
        )
    return Finding("clock", "ok", f"{now:%Y-%m-%d %H:%M:%S} UTC, not behind any signing time")


def _newest_signing_time(settings: Settings) -> tuple[datetime | None, str]:
    newest: tuple[datetime | None, str] = (None, "")
    for path in bundle_files(settings.paths.resolved("bundle_dir")):
        try:
            issued = inspect_bundle(path, max_bundle_bytes=settings.limits.max_bundle_bytes)
        except SigningError:
            continue
        at = issued.manifest.issued_at
        if newest[0] is None or at > newest[0]:
            newest = (at, f"the signing time of {path.name}")
    return newest


def check_unit(unit_path: Path | None = None) -> Finding:
    """The installed unit's ExecStart and --config against its own ProtectHome/PrivateTmp."""
    if unit_path is None:
        unit_path = next((p for p in UNIT_PATHS if p.is_file()), UNIT_PATHS[0])
    if not unit_path.is_file():
        problems = unit_path_problems(current_executable(), DEFAULT_CONFIG)
        if problems:
            return Finding(
                "systemd unit",
                "warn",
                f"not installed; `serve --print-unit` from here would not start: {problems[0]}",
                "install wasmgate outside /home, /root and /tmp (e.g. /opt/wasmgate)",
            )
        return Finding("systemd unit", "ok", f"not installed ({unit_path}); --print-unit is usable")
    exec_path, config = _exec_start(unit_path.read_text(encoding="utf-8"))
    if exec_path is None:
        fix = "write it again: wasmgate serve --print-unit > " + str(unit_path)
        return Finding("systemd unit", "warn", f"{unit_path}: no ExecStart= line", fix)
    problems = unit_path_problems(exec_path, config or DEFAULT_CONFIG)
    if problems:
        return Finding(
            "systemd unit",
            "error",
            f"{unit_path}: {'; '.join(problems)}",
            "install wasmgate outside /home, /root and /tmp, then --print-unit again",
        )
    if config is not None and not Path(config).is_file():
        return Finding(
            "systemd unit",
            "error",
            f"{unit_path}: ExecStart's --config {config} does not exist",
            f"create it: install -D -m 644 /dev/null {config} (an empty file keeps the "
            "built-in defaults), or take --config out of ExecStart",
        )
    return Finding("systemd unit", "ok", f"{unit_path}: ExecStart {exec_path} is visible to it")


def _exec_start(text: str) -> tuple[str | None, str | None]:
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            words = line.removeprefix("ExecStart=").split()
            config = words[words.index("--config") + 1] if "--config" in words[:-1] else None
            return (words[0] if words else None), config
    return None, None

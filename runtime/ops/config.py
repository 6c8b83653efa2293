"""Daemon settings: typed sections loaded from TOML, overridable by environment variables.

Precedence (highest first): environment ``WASMGATE_<SECTION>__<FIELD>`` (for example
``WASMGATE_HTTP__PORT=9000``), then the TOML file (``--config PATH``, default
``/etc/wasmgate/config.toml`` when it exists), then the built-in defaults.
Unknown keys are errors, in the file and in the environment alike.

The sections and their documented fields are in `config_network` (listeners, brokers,
endpoints) and `config_local` (paths, ceilings, store, samples, trust, fleet, logs); all
are importable from here. `Settings` is plain data: building one directly takes the values
given as they are; `load_settings` and `settings_from` add the environment and check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from wasmgate._compat import tomllib
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config_env import env_data, env_paths, merged, text_problem
from wasmgate.runtime.ops.config_local import (
    FleetSettings,
    LimitSettings,
    LogSettings,
    PathSettings,
    SamplesSettings,
    StoreSettings,
    StreamSettings,
    TrustSettings,
    WorkerSettings,
    default_data_dir,
)
from wasmgate.runtime.ops.config_network import (
    CloudSettings,
    GrpcSettings,
    HttpSettings,
    MqttSettings,
    RegistrySettings,
    TelemetrySettings,
)
from wasmgate.runtime.ops.config_shm import SharedMemorySettings
from wasmgate.signing.variables import Value as VariableValue
from wasmgate.typed import Document, Invalid, convert

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "CloudSettings",
    "FleetSettings",
    "GrpcSettings",
    "HttpSettings",
    "LimitSettings",
    "LogSettings",
    "MqttSettings",
    "PathSettings",
    "RegistrySettings",
    "SamplesSettings",
    "Settings",
    "SharedMemorySettings",
    "StoreSettings",
    "StreamSettings",
    "TelemetrySettings",
    "TrustSettings",
    "WorkerSettings",
    "default_data_dir",
    "load_settings",
    "settings_from",
]

DEFAULT_CONFIG_PATH = Path("/etc/wasmgate/config.toml")


class Settings(Document):
    """Root settings of ``wasmgate serve``; `load_settings` puts the environment's
    ``WASMGATE_*`` variables over the TOML file's values, see `config_env`."""

    http: HttpSettings = HttpSettings()
    """HTTP server (KServe V2, raw adapter endpoint, management API, metrics, status)."""
    grpc: GrpcSettings = GrpcSettings()
    """KServe V2 over gRPC; off unless ``grpc.port`` is set."""
    mqtt: MqttSettings = MqttSettings()
    """MQTT bridge; off unless ``mqtt.host`` is set."""
    paths: PathSettings = msgspec.field(default_factory=PathSettings)
    """Where bundles, state and caches live."""
    limits: LimitSettings = LimitSettings()
    """Daemon-wide ceilings on every manifest's limits."""
    workers: WorkerSettings = WorkerSettings()
    """How the daemon's threads use the CPUs it may run on (read at start)."""
    cloud: CloudSettings = CloudSettings()
    """Cloud fallback endpoint."""
    store: StoreSettings = StoreSettings()
    """Store-and-forward on disk: what waits for the broker or the cloud to come back."""
    samples: SamplesSettings = SamplesSettings()
    """Hard examples kept for retraining (tightens each manifest's ``[samples]``)."""
    registry: RegistrySettings = RegistrySettings()
    """OCI registry for bundle pulls and ``wasmgate bundle push|pull``."""
    trust: TrustSettings = TrustSettings()
    """Bundle trust policy (the trust file itself is ``paths.trust_file``)."""
    log: LogSettings = LogSettings()
    """Logging."""
    fleet: FleetSettings = FleetSettings()
    """Fleet membership (groups, the air-gapped desired-state file, retries)."""
    telemetry: TelemetrySettings = TelemetrySettings()
    """Traces (OpenTelemetry, OTLP/HTTP export); off unless ``telemetry.otlp_endpoint`` is set."""
    shared_memory: SharedMemorySettings = SharedMemorySettings()
    """System shared memory for local clients (Triton's extension); off by default."""
    profile: str | None = None
    """Device profile name or path to a profile TOML; None = detect the hardware."""
    drain_s: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    """On SIGTERM, time given to in-flight requests before the daemon exits."""
    variables: dict[str, dict[str, VariableValue]] = msgspec.field(default_factory=dict)
    """Operator variables per bundle (``[variables.<bundle>] name = value``): values of the
    params its manifest declares overridable, checked against the declared type and range
    when the bundle loads; a refused value is logged and the default kept. A value set over
    the management API or MQTT (persisted in the state dir) wins over this one."""


def load_settings(path: Path | None, *, required: bool = False) -> Settings:
    """Load settings from ``path`` (or the default file if it exists) plus the environment.

    Raises ConfigError with a one-line message naming the file, the key and the problem.
    """
    file_path = path if path is not None else DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    if path is not None or file_path.exists():
        try:
            with file_path.open("rb") as fh:
                data = tomllib.load(fh)
        except OSError as e:
            raise ConfigError(f"{file_path}: cannot read: {e.strerror or e}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file_path}: not valid TOML: {e}") from e
    elif required:
        raise ConfigError(f"{file_path}: cannot read: no such file")
    return settings_from(data, str(file_path) if data else "configuration")


def settings_from(data: Mapping[str, Any], source: str = "configuration") -> Settings:
    """``data`` (a config file's tables) with the environment on top, checked, as Settings.

    Raises ConfigError ``<source or variable>: <dotted key>: <problem>``. Conversion is
    strict: a file's value must have the field's type (``port = "9000"`` is refused, as
    the docs promise); an environment variable's text was already read as its field's
    type by `env_data` (``WASMGATE_HTTP__PORT=9000`` is a port)."""
    env = env_paths()
    _check_env_sections(env)
    full = merged(data, env_data(Settings))
    try:
        return convert(full, Settings, strict=True, whole="(root)")
    except Invalid as e:
        raise ConfigError(_message(source, full, e, env)) from e


def _check_env_sections(env: dict[tuple[str, ...], str]) -> None:
    """A misspelled section (``WASMGATE_HTPP__PORT``) is an error, not silently ignored."""
    sections = {
        f.name
        for f in msgspec.structs.fields(Settings)
        if isinstance(f.type, type) and issubclass(f.type, msgspec.Struct)
    }
    for path, name in sorted(env.items()):
        if len(path) > 1 and path[0] not in sections:
            known = ", ".join(sorted(sections))
            raise ConfigError(f"environment variable {name}: unknown section {path[0]!r} ({known})")


def _message(
    source: str, data: Mapping[str, Any], err: Invalid, env: dict[tuple[str, ...], str]
) -> str:
    key = _named_keys(data, err)
    unknown = str(err.__cause__).startswith("Object contains unknown field")
    problem = "unknown key" if unknown else err.what
    # The environment wins over the file, so a key an environment variable sets is its fault.
    loc = tuple(key.lower().split("."))
    blamed = next((env[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in env), None)
    if blamed is not None:
        source = f"environment variable {blamed}"
        problem = text_problem(os.environ.get(blamed, ""), problem)
    return f"{source}: {key}: {problem}"


def _named_keys(data: Mapping[str, Any], err: Invalid) -> str:
    """``err.where`` with the table keys msgspec leaves out found again: ``streams[...]``
    becomes ``streams.answers``, so the message names the key as the file spells it.

    msgspec converts a table's entries in order and stops at the first bad one, so the
    culprit is the first entry that, left alone in its table, fails the same way."""
    where = err.where
    trial: Any = data
    while "[...]" in where:
        head, _, tail = where.partition("[...]")
        path = head.split(".")
        table = _at(trial, path)
        found = None
        for key, value in table.items() if isinstance(table, Mapping) else ():
            alone = _with(trial, path, {key: value})
            if _fails_as(alone, err):
                found, trial = key, alone
                break
        if found is None:
            return where  # not found again: the message still names the table
        where = f"{head}.{found}{tail}"
    return where


def _fails_as(data: Any, err: Invalid) -> bool:
    try:
        convert(data, Settings, strict=True, whole="(root)")
    except Invalid as e:
        return (e.where, e.what) == (err.where, err.what)
    return False


def _at(data: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _with(data: Any, path: list[str], value: Any) -> Any:
    """A copy of ``data`` with the value at ``path`` replaced (``data`` itself unchanged)."""
    if not path:
        return value
    return {**data, path[0]: _with(data[path[0]], path[1:], value)}

"""The hardened systemd unit (``deploy/wasmgate.service`` is this, rendered with defaults).

``wasmgate serve --print-unit`` prints it with ``ExecStart`` pointing at the running
``wasmgate`` executable. Choices (see ``docs/deploy.md``):
``Type=notify`` with ``WatchdogSec``; DynamicUser with state/cache directories; no
``MemoryDenyWriteExecute`` (wasmtime's JIT needs W→X pages); no ``ProcSubset=pid`` (ONNX
Runtime reads /proc/cpuinfo); ``@resources`` stays allowed (ORT sets thread affinity);
``IPAddressAllow=localhost`` by default — widen it in a drop-in for a remote MQTT broker or
cloud endpoint, and give NPUs their device node there (``DeviceAllow=``).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

DEFAULT_EXEC = "/usr/local/bin/wasmgate"
DEFAULT_CONFIG = "/etc/wasmgate/config.toml"

# Where the Debian package puts the environment (deploy/debtree.py PREFIX): a unit for that
# executable is the package's own, in /lib/systemd/system.
PACKAGED_PREFIX = "/opt/wasmgate/"
_HEADER = """\
# wasmgate: WebAssembly-sandboxed edge inference daemon (Type=notify, hardened).
# Install: wasmgate serve --print-unit > /etc/systemd/system/wasmgate.service
#          systemctl daemon-reload && systemctl enable --now wasmgate
# Per-device relaxations (NPU device nodes, a remote MQTT broker) belong in a drop-in:
#   /etc/systemd/system/wasmgate.service.d/override.conf (see docs/deploy.md).
"""
# The package's unit says how to change it without a copy: a copy in /etc/systemd/system
# would hide every later version of the package's unit and outlive `apt purge`.
_PACKAGED_HEADER = """\
# wasmgate: WebAssembly-sandboxed edge inference daemon (Type=notify, hardened).
# Installed by the wasmgate package, which replaces this file on upgrade. Change settings
# in a drop-in: systemctl edit wasmgate (/etc/systemd/system/wasmgate.service.d/), e.g. for
# NPU device nodes or a remote MQTT broker (see docs/deploy.md); never in a copy of this
# file in /etc/systemd/system, which would hide later versions of it and outlive a purge.
"""
UNIT_TEMPLATE = """\
[Unit]
Description=wasmgate edge inference daemon
Documentation=https://github.com/wasmgate/wasmgate
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=300
StartLimitBurst=5

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start} serve{config}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2s
WatchdogSec=30s
TimeoutStartSec=120s
TimeoutStopSec=30s
Environment=WASMGATE_PATHS__DATA_DIR=/var/lib/wasmgate
Environment=WASMGATE_PATHS__CACHE_DIR=/var/cache/wasmgate
Environment=WASMGATE_PATHS__TRUST_FILE=/etc/wasmgate/trust.json
Environment=HOME=/var/lib/wasmgate
# What libraries cache per user goes with the caches, not the state: ONNX Runtime versions
# that ignore ORT_DISABLE_TELEMETRY (set by wasmgate itself) write their device id there.
Environment=XDG_CACHE_HOME=/var/cache/wasmgate
DynamicUser=yes
StateDirectory=wasmgate
StateDirectoryMode=0700
CacheDirectory=wasmgate
CacheDirectoryMode=0700
ConfigurationDirectory=wasmgate
RuntimeDirectory=wasmgate
UMask=0077
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
# wasmtime's JIT maps code pages writable then executable: MemoryDenyWriteExecute breaks it.
MemoryDenyWriteExecute=no
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM
CapabilityBoundingSet=
AmbientCapabilities=
PrivateUsers=yes
RemoveIPC=yes
KeyringMode=private
DevicePolicy=closed
IPAddressDeny=any
IPAddressAllow=localhost
MemoryMax=1G
MemoryHigh=900M
TasksMax=128
LimitNOFILE=4096

[Install]
WantedBy=multi-user.target
"""


def render_unit(exec_path: str = DEFAULT_EXEC, config: str = DEFAULT_CONFIG) -> str:
    """The unit text with ``ExecStart`` running ``exec_path serve [--config config]``.

    The default config goes without ``--config``: `serve` reads that file when it exists and
    runs on the built-in defaults when it does not (docs/deploy.md calls it optional), where
    a missing ``--config`` file stops it (exit 2: a restart loop under systemd). Another
    path is named, so the service cannot start without it."""
    option = "" if config == DEFAULT_CONFIG else f" --config {shlex.quote(config)}"
    header = _PACKAGED_HEADER if exec_path.startswith(PACKAGED_PREFIX) else _HEADER
    body = UNIT_TEMPLATE.replace("{exec_start}", shlex.quote(exec_path))
    return header + body.replace("{config}", option)


# What the unit's protections hide from the service: ProtectHome=yes makes these empty...
_HOME_HIDDEN = ("/home", "/root", "/run/user")
# ...and PrivateTmp=yes gives the service its own empty /tmp and /var/tmp.
_TMP_HIDDEN = ("/tmp", "/var/tmp")  # noqa: S108 - names them, never writes there


def hidden_by_unit(path: str) -> str | None:
    """Which protection of the unit hides ``path`` from the service (None: visible).

    Symlinks are resolved too: a venv's ``python`` may point into /root even when the venv
    itself is elsewhere."""
    for candidate in dict.fromkeys((path, str(Path(path).resolve()))):
        for prefixes, option in (
            (_HOME_HIDDEN, "ProtectHome=yes"),
            (_TMP_HIDDEN, "PrivateTmp=yes"),
        ):
            if any(candidate == p or candidate.startswith(p + "/") for p in prefixes):
                return f"{candidate} is hidden by {option}"
    return None


def _interpreter(script: str) -> str | None:
    """The ``#!`` interpreter of a console script (None when it is not a script)."""
    try:
        with Path(script).open("rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode(errors="replace").split()
    return parts[0] if parts else None


def unit_path_problems(exec_path: str, config: str) -> list[str]:
    """One line per path the unit needs that its own protections hide from the service."""
    problems = []
    named = [
        ("ExecStart", exec_path),
        ("its interpreter", _interpreter(exec_path)),
        ("--config", config),
    ]
    for what, path in named:
        why = hidden_by_unit(path) if path else None
        if why is not None:
            problems.append(f"{what} {path}: {why}")
    return problems


def current_executable() -> str:
    """The ``wasmgate`` script next to this Python, else on PATH, else the default."""
    beside = Path(sys.executable).with_name("wasmgate")
    if beside.exists():
        return str(beside)
    return shutil.which("wasmgate") or DEFAULT_EXEC

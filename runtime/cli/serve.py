"""`wasmgate serve`: run the daemon."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

from wasmgate.runtime.cli._common import EXIT_FAILURE, EXIT_USAGE, CliError, SubParsers
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import DEFAULT_CONFIG_PATH, Settings, load_settings
from wasmgate.typed import replace


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "serve",
        help="Run the inference daemon.",
        description="Run the inference daemon (HTTP KServe V2, MQTT bridge, bundle registry).",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML config file (default /etc/wasmgate/config.toml if it exists).",
    )
    parser.add_argument("--host", default=None, help="Override http.host.")
    parser.add_argument("--port", type=int, default=None, help="Override http.port.")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="Serve the example adapters, built and signed on first run by a demo key that "
        "is trusted for the example names only (never use on a production gateway).",
    )
    parser.add_argument(
        "--print-unit",
        action="store_true",
        help="Print the hardened systemd unit for this installation and exit "
        "(save it as /etc/systemd/system/wasmgate.service).",
    )
    # A data-plane worker, started by the supervisor with its spec on stdin (not for hands).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    # The zygote workers are forked from, exec'd by the supervisor with its socket's fd.
    parser.add_argument("--zygote", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=_run)


def _print_unit(args: argparse.Namespace) -> int:
    from wasmgate.runtime.ops.unit import (  # noqa: PLC0415
        DEFAULT_CONFIG,
        current_executable,
        render_unit,
        unit_path_problems,
    )

    config = str(args.config.resolve()) if args.config is not None else DEFAULT_CONFIG
    exec_path = current_executable()
    print(render_unit(exec_path, config), end="")
    # On stderr, so `--print-unit > wasmgate.service` still writes a clean unit.
    for problem in unit_path_problems(exec_path, config):
        print(
            f"warning: {problem}: the service will not start. Install wasmgate outside "
            "/home, /root and /tmp (e.g. python3 -m venv /opt/wasmgate) and put the config "
            "under /etc/wasmgate.",
            file=sys.stderr,
        )
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.print_unit:
        return _print_unit(args)
    from wasmgate.runtime.http._aiohttp_private import import_lean  # noqa: PLC0415

    import_lean()  # first: before anything imports aiohttp (its unused CA loading skipped)
    if args.worker:
        from wasmgate.runtime.compose.worker import read_spec, run_worker  # noqa: PLC0415

        return asyncio.run(run_worker(read_spec()))
    if args.zygote is not None:
        from wasmgate.runtime.compose.zygote import serve_zygote  # noqa: PLC0415

        return serve_zygote(socket.socket(fileno=args.zygote), os.getppid())
    from wasmgate.runtime.compose.daemon import ListenError, check_listen, run_daemon  # noqa: PLC0415
    from wasmgate.runtime.compose.zygote import fork_early  # noqa: PLC0415
    from wasmgate.runtime.ops.lock import data_dir_lock  # noqa: PLC0415 - keep `--help` fast

    try:
        settings = load_settings(args.config)
    except ConfigError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:
        settings = replace(settings, http=replace(settings.http, **overrides))
    config_path = args.config if args.config is not None else _default_config()
    # Now, imported and with no thread yet: the workers share this process's import heap.
    zygote = fork_early(settings)
    # The demo owns <data_dir>/demo only, so a demo beside the real daemon is fine.
    owned = settings.paths.data_dir / "demo" if args.demo else settings.paths.data_dir
    try:
        check_listen(settings.http)  # before the demo build and the bundles: fail in seconds
        with data_dir_lock(owned):
            if args.demo:
                settings = _demo_settings(settings)
            return asyncio.run(run_daemon(settings, config_path, zygote))
    except ConfigError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    except ListenError as e:
        raise CliError(str(e), EXIT_FAILURE) from e


def _demo_settings(settings: Settings) -> Settings:
    from wasmgate.guest_adapters.errors import GuestAdapterError  # noqa: PLC0415
    from wasmgate.runtime.bundles.demo import apply_demo  # noqa: PLC0415 - needs zig; only for --demo
    from wasmgate.runtime.ops.logs import setup_logging  # noqa: PLC0415
    from wasmgate.signing.errors import SigningError  # noqa: PLC0415

    # Logging first, so the operator sees the DEMO MODE lines and what was built.
    setup_logging(settings.log.format, settings.log.level)
    try:
        return apply_demo(settings)
    except (GuestAdapterError, SigningError, OSError) as e:
        raise CliError(f"demo set-up failed: {e}") from e


def _default_config() -> Path | None:
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None

"""`wasmgate serve`: run the daemon."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from wasmgate.runtime.cli._common import EXIT_USAGE, CliError, SubParsers
from wasmgate.runtime.config import load_settings
from wasmgate.runtime.errors import ConfigError


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
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from wasmgate.runtime.daemon import run_daemon  # noqa: PLC0415 - keep `--help` fast

    try:
        settings = load_settings(args.config)
    except ConfigError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:
        settings = settings.model_copy(update={"http": settings.http.model_copy(update=overrides)})
    return asyncio.run(run_daemon(settings))

"""`wasmgate run-guest`: run a WASI command module with wasi-nn, like ``wasmedge``.

    wasmgate run-guest GUEST.wasm [--dir HOST:GUEST[:ro]] [--env K=V] [--profile NAME|PATH]
                       [--nn-preload NAME:ENCODING:TARGET:PATH] [-- args...]
    wasmgate run-guest [--dir ...] [--env ...] [--nn-preload ...] GUEST.wasm args...

The second form is WasmEdge's own order: everything after the module goes to the guest.
In the first form the options directly after the module are ours up to ``--``.

Encodings: ``onnx`` (ONNX Runtime) and ``tensorflowlite`` (LiteRT), loaded by the daemon's
backends with the device profile ``serve`` would use (``--profile``, else detected); the
target is ignored, the profile picks the providers. Full-integer TFLite models keep their
int8/uint8 tensors, as WasmEdge gives them to guests. The exit code is
the guest's; a trap or a load failure prints one ``error:`` line and exits 134 (like an
aborted process), so it cannot be mistaken for a guest's own exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.cli._common import EXIT_USAGE, CliError, SubParsers
from wasmgate.runtime.cli._models import (
    PreloadedModels,
    add_profile_option,
    load_model,
    profile_named,
)
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox.errors import SandboxError
from wasmgate.sandbox.models import ModelHandle
from wasmgate.sandbox.runner import DirMapping, GuestRunner, NnPreload

EXIT_TRAP = 134

HELP = "Run a WASI command module with wasi-nn (like wasmedge)."


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """Add the ``run-guest`` sub-command."""
    parser = sub.add_parser(
        "run-guest",
        help=HELP,
        description=HELP,
        epilog=(
            "Forms: run-guest GUEST.wasm [options] [-- args...], or WasmEdge's "
            "run-guest [options] GUEST.wasm args... Encodings: onnx, tensorflowlite. "
            f"Exit code: the guest's; {EXIT_TRAP} if it traps or cannot be loaded."
        ),
    )
    parser.add_argument("guest", type=Path, help="the .wasm command module (exports _start)")
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, help="[our options] [--] arguments for the guest"
    )
    parser.add_argument(
        "--dir",
        action="append",
        default=[],
        metavar="HOST:GUEST[:ro]",
        help="make a host directory visible to the guest (repeatable)",
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="K=V", help="environment variable"
    )
    parser.add_argument(
        "--nn-preload",
        action="append",
        default=[],
        metavar="NAME:ENCODING:TARGET:PATH",
        help="a model for load_by_name, e.g. default:ONNX:CPU:model.onnx (repeatable)",
    )
    add_profile_option(parser)
    parser.set_defaults(func=_run)


_OPTIONS = {"--dir": "dir", "--env": "env", "--nn-preload": "nn_preload", "--profile": "profile"}


def _split_trailing(args: argparse.Namespace) -> None:
    """Move our options that follow GUEST.wasm (up to ``--``) out of the guest's argv."""
    rest: list[str] = list(args.args)
    while rest:
        head = rest[0]
        name, eq, value = head.partition("=")
        if head == "--":
            rest.pop(0)
            break
        if name not in _OPTIONS:
            break
        rest.pop(0)
        if not eq:
            if not rest:
                raise CliError(f"{name} needs a value", EXIT_USAGE)
            value = rest.pop(0)
        if name == "--profile":
            args.profile = value
        else:
            getattr(args, _OPTIONS[name]).append(value)
    args.args = rest


def _parse(
    args: argparse.Namespace,
) -> tuple[list[DirMapping], list[tuple[str, str]], list[NnPreload]]:
    _split_trailing(args)
    try:
        dirs = [DirMapping.parse(d) for d in args.dir]
        preloads = [NnPreload.parse(p) for p in args.nn_preload]
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    env = []
    for kv in args.env:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise CliError(f"--env {kv!r}: expected K=V", EXIT_USAGE)
        env.append((key, value))
    return dirs, env, preloads


def _load(preloads: list[NnPreload], options: LoadOptions) -> dict[str, ModelHandle]:
    named: dict[str, ModelHandle] = {}
    for p in preloads:
        try:
            named[p.name] = load_model(p.path.read_bytes(), p.encoding, p.name, options)
        except OSError as e:
            raise CliError(f"--nn-preload {p.name}: cannot read {p.path}: {e.strerror}") from e
        except BackendError as e:
            raise CliError(f"--nn-preload {p.name}: cannot load {p.path}: {e}") from e
    return named


def _run(args: argparse.Namespace) -> int:
    dirs, env, preloads = _parse(args)
    try:
        wasm = args.guest.read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {args.guest}: {e.strerror}", EXIT_USAGE) from e
    options = LoadOptions(profile_named(args.profile), raw_quantized_io=True)
    models = PreloadedModels(_load(preloads, options), options)
    runner = GuestRunner(models, dirs, env, list(args.args))
    try:
        code = runner.run(wasm, args.guest.name)
    except SandboxError as e:
        sys.stdout.flush()
        print(f"error: {e}", file=sys.stderr)
        return EXIT_TRAP
    finally:
        for line in runner.log:
            print(f"wasmgate: {line}", file=sys.stderr)
    return code

"""`wasmgate adapter`: build, scaffold and try adapters (no daemon, no signing needed).

- ``build SRC.c|DIR --out adapter.wasm``: Zig's C compiler from PyPI, cached by content.
- ``new DIR [--from EXAMPLE]``: copy an example (source, prebuilt module, bundle.toml,
  samples) to start from.
- ``test ADAPTER.wasm|SRC.c|DIR``: run the adapter once per payload in the real sandbox with
  real models (``run_adapter.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

from wasmgate.guest_adapters.build import build_adapter
from wasmgate.guest_adapters.errors import AdapterBuildError, GuestAdapterError
from wasmgate.guest_adapters.examples import (
    example_dir,
    example_names,
    models_dir,
    reachable_names,
)
from wasmgate.runtime.cli._common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    SubParsers,
    say,
)
from wasmgate.runtime.cli._models import add_profile_option


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "adapter",
        help="Build, scaffold and test adapters.",
        description="Build C adapters to WebAssembly, start one from an example, run it locally.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    build = actions.add_parser(
        "build",
        help="Compile SRC.c or DIR/*.c to an optimized, stripped wasm32-wasi reactor module.",
    )
    build.add_argument("src", type=Path, metavar="SRC.c|DIR")
    build.add_argument("--out", type=Path, required=True, metavar="adapter.wasm")
    build.add_argument("--cache-dir", type=Path, help="Build cache (default ~/.cache/wasmgate).")
    build.set_defaults(func=_build)

    new = actions.add_parser("new", help="Start an adapter in DIR from a bundled example.")
    new.add_argument("dir", type=Path, metavar="DIR")
    new.add_argument("--from", dest="example", default="digits", help="Example to copy.")
    new.add_argument("--name", help="Bundle name (default: DIR's name).")
    new.set_defaults(func=_new)

    lst = actions.add_parser(
        "examples",
        help="List the bundled example adapters (--path: print their directory only).",
    )
    lst.add_argument(
        "--path",
        action="store_true",
        help="Print only the examples directory, for S=$(wasmgate adapter examples --path).",
    )
    lst.set_defaults(func=_examples)

    test = actions.add_parser(
        "test",
        help="Run an adapter once per payload in the sandbox with real models.",
        description="Run ADAPTER (a .wasm, a .c, or a DIR with bundle.toml) once per payload. "
        "A DIR's bundle.toml supplies models (fp32 variant), params and limits; options override. "
        "Without --payload, every file in DIR/samples is fed; samples/expect.toml names the "
        'ones meant to fail ("malformed.json" = 1). Exit 0 when every payload got the '
        "status it should (0 unless expect.toml says otherwise), else 1.",
    )
    test.add_argument("adapter", type=Path, metavar="ADAPTER.wasm|SRC.c|DIR")
    test.add_argument(
        "--model", action="append", default=[], metavar="NAME=PATH", help="Model for load_by_name."
    )
    test.add_argument(
        "--payload", action="append", default=[], metavar="FILE|-", help="Payload (repeatable)."
    )
    test.add_argument("--param", action="append", default=[], metavar="K=V", help="param.K.")
    test.add_argument("--meta", action="append", default=[], metavar="K=V", help="Request meta.")
    test.add_argument("--content-type", help="Content type (default: by file extension).")
    add_profile_option(test)
    test.set_defaults(func=_test)


def _build(args: argparse.Namespace) -> int:
    try:
        built = build_adapter(args.src, args.out, cache_dir=args.cache_dir, progress=say)
    except AdapterBuildError as e:
        if e.output:
            print(e.output, file=sys.stderr)
        raise CliError(str(e)) from e
    except GuestAdapterError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    size = args.out.stat().st_size
    how = "cached" if built.cached else "compiled"
    print(f"{args.out}: {size} bytes, sha256 {built.sha256} ({how})")
    return EXIT_OK


def _examples(args: argparse.Namespace) -> int:
    if args.path:
        print(example_dir(example_names()[0]).parent)
        return EXIT_OK
    for name in example_names():
        print(f"{name}\t{example_dir(name)}")
    return EXIT_OK


_NAME_LINE = re.compile(r'^name = "[^"]*"$', re.MULTILINE)
_HEADER = re.compile(r"\A(?:#[^\n]*\n)+")
_PACKAGED_MODEL = re.compile(r'"\.\./\.\./models/([^"/]+)"')
_VALID_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _new(args: argparse.Namespace) -> int:
    dest: Path = args.dir
    name = args.name or dest.resolve().name
    if not _VALID_NAME.match(name):
        raise CliError(f"bundle name {name!r} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
    try:
        src = example_dir(args.example)
    except GuestAdapterError as e:
        raise CliError(f"{e} (try: {', '.join(example_names())})", EXIT_USAGE) from e
    if dest.exists() and any(dest.iterdir()):
        raise CliError(f"{dest} exists and is not empty")
    shutil.copytree(src, dest, dirs_exist_ok=True)
    # The example's prebuilt module is its source's build: stamped newer than the copied
    # source, `bundle build` uses it as is, so a core install (no `sdk` extra, no compiler)
    # can bundle the copy; editing the source makes it older, and the next build rebuilds.
    for module in dest.glob("*.wasm"):
        os.utime(module)
    toml = dest / "bundle.toml"
    toml.write_text(_own_bundle_toml(toml.read_text(encoding="utf-8"), name, dest), "utf-8")
    print(f"{dest}: adapter {name!r} from example {args.example!r}. Next:")
    print(f"  wasmgate adapter build {dest} --out {dest}/adapter.wasm")
    print(f"  wasmgate adapter test {dest}")
    # A signing key must be trusted for every name the bundle can be reached by.
    names = " ".join(f"--names {n}" for n in reachable_names(toml))
    print(f"  wasmgate trust add KEY.pub {names}")
    return EXIT_OK


def _own_bundle_toml(text: str, name: str, dest: Path) -> str:
    """The example's bundle.toml made the new adapter's own: its name and header, and the
    models it names copied into ``dest/models`` (relative paths: the directory can move,
    and no path into this machine's site-packages ends up in it)."""
    header = (
        f"# {name}: started from a wasmgate example (wasmgate adapter new). Build, then sign:\n"
        "#   wasmgate adapter build . --out adapter.wasm\n"
        f"#   wasmgate bundle build . --key ~/wasmgate.key --out {name}-1.wgb\n"
    )
    text = _HEADER.sub(header, _NAME_LINE.sub(f'name = "{name}"', text, count=1), count=1)
    for model in sorted(set(_PACKAGED_MODEL.findall(text))):
        (dest / "models").mkdir(exist_ok=True)
        shutil.copyfile(models_dir() / model, dest / "models" / model)
    return _PACKAGED_MODEL.sub(r'"models/\1"', text)


def _test(args: argparse.Namespace) -> int:
    from wasmgate.runtime.cli.run_adapter import TestRun  # noqa: PLC0415 - ORT is slow to import

    try:
        run = TestRun.from_args(args)
    except GuestAdapterError as e:
        if isinstance(e, AdapterBuildError) and e.output:
            print(e.output, file=sys.stderr)
        raise CliError(str(e), EXIT_USAGE) from e
    try:
        statuses = run.run_all()
    except GuestAdapterError as e:
        raise CliError(str(e)) from e
    return EXIT_OK if run.passed(statuses) else EXIT_FAILURE

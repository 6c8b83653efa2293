"""`wasmgate profiles`: list, show and detect device profiles.

``detect`` reads /proc, /sys, /dev and /etc below ``--root`` (default ``/``), prints the chosen
profile and the evidence, and the other matching profiles with their priority.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from wasmgate.device_profiles import (
    Detection,
    DeviceProfile,
    ProfileError,
    detect,
    load_all,
    load_profile,
)
from wasmgate.device_profiles.ort import option_source
from wasmgate.device_profiles.schema import field_docs
from wasmgate.runtime.cli._common import EXIT_OK, CliError, SubParsers
from wasmgate.runtime.cli._profile_runs import ort_devices, placement_lines
from wasmgate.typed import plain

T = TypeVar("T")


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "profiles",
        help="List, show and detect device profiles.",
        description="List, show and detect device profiles.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="List the packaged profiles.").set_defaults(func=_list)
    show = actions.add_parser("show", help="Show one profile (name or path to a TOML file).")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true", help="Print the validated profile as JSON.")
    show.add_argument(
        "--placement",
        action="store_true",
        help="Also load the test models on it here and say where their nodes run.",
    )
    show.set_defaults(func=_show)
    det = actions.add_parser("detect", help="Detect this machine's profile and show evidence.")
    det.add_argument(
        "--root", type=Path, default=Path("/"), help="Read proc/, sys/, dev/ below this directory."
    )
    det.add_argument("--json", action="store_true", help="Print the result as JSON.")
    det.set_defaults(func=_detect)
    actions.add_parser("schema", help="Describe every profile field.").set_defaults(func=_schema)


def _list(_args: argparse.Namespace) -> int:
    profiles = _guard(load_all)
    width = max(len(p.name) for p in profiles)
    for p in profiles:
        print(f"{p.name:<{width}}  {p.cpu.arch:<7}  {' > '.join(p.precision):<20}  {p.description}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    profile = _guard(lambda: load_profile(args.name))
    if args.json:
        # ensure_ascii off: a profile's text is printed as written, as it always was.
        print(json.dumps(plain(profile), indent=2, ensure_ascii=False))
    else:
        print("\n".join(describe(profile)))
    if args.placement:
        print("\n".join(placement_lines(profile)))
    return EXIT_OK


def _detect(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not root.is_dir():
        raise CliError(f"--root {root}: not a directory")
    result = _guard(lambda: detect(root))
    if args.json:
        print(json.dumps(_detection_json(result), indent=2))
        return EXIT_OK
    print(f"profile: {result.profile.name} — {result.profile.description}")
    print("evidence:")
    for line in result.evidence:
        print(f"  - {line}")
    devices = ort_devices()
    if devices:
        print("onnxruntime devices (get_ep_devices):")
        print("\n".join(f"  - {d}" for d in devices))
    others = result.candidates[1:]
    if others:
        print("also matched: " + ", ".join(f"{n} (priority {p})" for n, p, _ in others))
    return EXIT_OK


def _schema(_args: argparse.Namespace) -> int:
    for path, kind, doc in field_docs():
        print(f"{path}  ({kind})")
        if doc:
            print(f"    {doc}")
    return EXIT_OK


def describe(p: DeviceProfile) -> list[str]:
    """Human-readable lines for `profiles show`."""
    ort = p.onnxruntime
    lines = [
        f"{p.name}: {p.description}",
        f"cpu: {p.cpu.arch}, requires {' '.join(p.cpu.features) or 'nothing'}",
        f"precision order: {' > '.join(p.precision)}",
        "onnxruntime providers:",
    ]
    for ep in ort.providers:
        opts = ", ".join(f"{k}={v}" for k, v in ep.options.items())
        lines.append(f"  - {ep.name}" + (f" ({opts})" if opts else "") + _claim(ep.name))
    for plugin in ort.plugins:
        opts = ", ".join(f"{k}={v}" for k, v in plugin.options.items())
        lines.append(
            f"  - plugin {plugin.ep_name} from {plugin.source}: devices "
            f"{' > '.join(plugin.device_types) or 'any'}"
            + (f" of {plugin.vendor}" if plugin.vendor else "")
            + (f" ({opts})" if opts else "")
            + _claim(plugin.ep_name)
        )
    if ort.selection_policy:
        lines.append(f"  device selection policy {ort.selection_policy}")
    lines.append(
        f"  threads intra={ort.intra_op_threads or 'auto'} inter={ort.inter_op_threads}, "
        f"graph optimization {ort.graph_optimization_level}, "
        f"accelerator required: {'yes' if ort.accelerator_required else 'no'}, "
        f"optimized-model cache: {'on' if ort.optimized_model_cache else 'off'}"
    )
    lines += [f"  session {k} = {v}" for k, v in ort.session_config.items()]
    delegates = ", ".join(f"{d.name} ({d.library})" for d in p.tflite.delegates) or "none"
    lines.append(f"tflite: delegates {delegates}; threads {p.tflite.threads or 'auto'}")
    lines.append(
        f"batching caps: max_batch_size {p.batching.max_batch_size}, "
        f"max_queue_delay_us {p.batching.max_queue_delay_us}"
    )
    rules = _set_fields(p.detect, exclude={"priority"})
    shown = "; ".join(f"{k} {', '.join(v)}" for k, v in rules.items()) or "arch and CPU flags only"
    lines.append(f"detection (priority {p.detect.priority}): {shown}")
    lines += [f"unverified on real hardware: {u}" for u in p.unverified]
    return lines


def _claim(provider: str) -> str:
    """Whether CI runs this EP's options against the real EP, else where they come from."""
    source = option_source(provider)
    return (
        " [options tested in CI against the real EP]"
        if source == "tested"
        else f" [unverified: options from {source}]"
    )


def _set_fields(struct: msgspec.Struct, exclude: set[str]) -> dict[str, Any]:
    """The fields of ``struct`` whose value differs from their default, but ``exclude``."""
    out = {}
    for f in msgspec.structs.fields(struct):
        value, factory = getattr(struct, f.name), f.default_factory
        default = factory() if factory is not msgspec.NODEFAULT else f.default
        if f.name not in exclude and value != default:
            out[f.name] = value
    return out


def _detection_json(result: Detection) -> dict[str, object]:
    return {
        "onnxruntime_devices": ort_devices(),
        "profile": result.profile.name,
        "evidence": result.evidence,
        "candidates": [
            {"profile": n, "priority": p, "evidence": e} for n, p, e in result.candidates
        ],
        "facts": {
            "arch": result.facts.arch,
            "dt_model": result.facts.dt_model,
            "dt_compatible": list(result.facts.dt_compatible),
            "cpu_parts": sorted(result.facts.cpu_parts),
            "accel_drivers": sorted(result.facts.accel_drivers),
        },
    }


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ProfileError as e:
        raise CliError(str(e)) from e

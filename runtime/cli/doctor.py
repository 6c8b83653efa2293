"""``wasmgate doctor [--config FILE] [--json]``: check a gateway as an operator would.

Config, paths and their permissions, the trust file and its signers, every file in the
bundle directory (verifies, refused and why, older than installed), the device profile and
the execution providers that really load a model, the MQTT broker and its round trip, the
registry (and the samples' one, ``samples.oci_repository``), the clock, the systemd unit's
paths against its own protections, and whether the workers can be confined. Nothing is
changed on disk.

Exit code = the worst finding: 0 all ok (or skipped), 1 a warning, 2 an error.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.cli._broker_probe import probe_broker
from wasmgate.runtime.cli._checks import (
    EXIT_CODES,
    Finding,
    Level,
    check_bundles,
    check_clock,
    check_data_dir,
    check_unit,
    load_trust_readonly,
)
from wasmgate.runtime.cli._common import SubParsers, plain_text
from wasmgate.runtime.cli._ep_checks import check_placement
from wasmgate.runtime.cli._models import load_model
from wasmgate.runtime.cli._registry_probe import probe_registry, probe_samples_registry
from wasmgate.runtime.cli._running import running_paths
from wasmgate.runtime.errors import BackendError, ConfigError
from wasmgate.runtime.ops import landlock
from wasmgate.runtime.ops.config import DEFAULT_CONFIG_PATH, Settings, load_settings

_MARK = {"ok": "ok  ", "skip": "skip", "warn": "WARN", "error": "FAIL"}


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "doctor",
        help="Check this gateway: config, paths, trust, bundles, profile, broker, clock, unit.",
        description=plain_text(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, default=None, help="TOML config file to check.")
    parser.add_argument("--json", action="store_true", help="Print the findings as JSON.")
    parser.set_defaults(func=_run)


def run_checks(config: Path | None) -> list[Finding]:
    """Every check, in the order an operator would go through them."""
    given = config is not None
    try:
        settings = load_settings(config)
    except ConfigError as e:
        return [Finding("config", "error", str(e), _config_fix(config))]
    if config is None and DEFAULT_CONFIG_PATH.is_file():
        config = DEFAULT_CONFIG_PATH  # what load_settings read
    source = str(config) if config is not None else "defaults and environment"
    findings = [Finding("config", "ok", f"valid ({source})")]
    # The files the running (else the installed) daemon really uses, not this shell's.
    settings, daemon = running_paths(settings, given)
    findings.append(daemon)
    findings += check_data_dir(settings)
    trust, trust_finding = load_trust_readonly(settings)
    findings.append(trust_finding)
    findings += check_bundles(settings, trust)
    findings += _check_profile(settings)
    findings.append(probe_broker(settings.mqtt))
    findings.append(probe_registry(settings.registry))
    findings.append(probe_samples_registry(settings.samples, settings.registry))
    findings.append(check_clock(settings))
    findings.append(check_unit())
    findings.append(_check_workers(settings))
    return findings


def _check_workers(settings: Settings) -> Finding:
    """Whether this kernel lets the data-plane workers give up the filesystem
    (`wasmgate.runtime.ops.confine`)."""
    if settings.workers.count == 1:
        return Finding("workers", "skip", "workers.count = 1: one process, nothing to confine")
    abi = landlock.abi_version()
    if abi:
        return Finding("workers", "ok", f"confined with Landlock ABI {abi}: no key file reachable")
    return Finding(
        "workers", "warn",
        "this kernel has no Landlock: workers keep the file access of the service's user "
        "(no new privileges and no capabilities still hold)",
        "a kernel 5.13 or later with landlock in its LSM list (lsm=landlock,... on the kernel "
        "command line)",
    )  # fmt: skip


def _config_fix(config: Path | None) -> str:
    """How to repair an unloadable config: a missing file is created, not "fixed"."""
    if config is not None and not config.exists():
        return (
            f"create it: install -D -m 644 /dev/null {config} (an empty file keeps the "
            "built-in defaults; the keys are in docs/operator.md), or leave --config out"
        )
    return "fix the named key or variable"


def _check_profile(settings: Settings) -> Iterator[Finding]:
    from wasmgate.guest_adapters.examples import models_dir  # noqa: PLC0415
    from wasmgate.runtime.compose.app import configured_profile  # noqa: PLC0415 - the daemon's choice

    try:
        profile = configured_profile(settings)
    except ConfigError as e:
        yield Finding("device profile", "error", str(e), "set `profile` to a listed profile")
        return
    how = "configured" if settings.profile is not None else "detected"
    yield Finding("device profile", "ok", f"{profile.name} ({how})")
    wanted = [p.name for p in profile.onnxruntime.providers]
    for encoding, file in (("onnx", "digits-fp32.onnx"), ("tflite", "digits-fp32.tflite")):
        check = f"providers: {encoding}"
        try:
            model = load_model(
                (models_dir() / file).read_bytes(), encoding, "doctor", LoadOptions(profile)
            )
        except (BackendError, OSError) as e:
            # ONNX Runtime is required; LiteRT only where the bundles ship .tflite models.
            level: Level = "error" if encoding == "onnx" else "warn"
            yield Finding(check, level, f"does not load: {e}", _RUNTIME_FIX[encoding])
            continue
        used = list(model.providers)
        model.close()
        missing = [p for p in wanted if p not in used] if encoding == "onnx" else []
        if missing and encoding == "onnx":
            yield Finding(
                check,
                "warn",
                f"loads on {', '.join(used)}; the profile also wants "
                f"{', '.join(missing)}, which this ONNX Runtime does not provide",
                "install the onnxruntime build with that provider, or ignore on CPU-only hosts",
            )
        else:
            yield Finding(check, "ok", f"a test model loads on {', '.join(used)}")
    yield from check_placement(profile)


_RUNTIME_FIX = {
    "onnx": "reinstall ONNX Runtime for this machine: pip install --force-reinstall onnxruntime",
    "tflite": "only bundles with .tflite models need LiteRT: pip install ai-edge-litert",
}


def worst(findings: list[Finding]) -> int:
    return max((EXIT_CODES[f.level] for f in findings), default=0)


def _run(args: argparse.Namespace) -> int:
    findings = run_checks(args.config)
    code = worst(findings)
    if args.json:
        print(json.dumps({"exit_code": code, "findings": [asdict(f) for f in findings]}, indent=2))
        return code
    for f in findings:
        print(f"{_MARK[f.level]}  {f.check}: {f.message}")
        if f.fix and f.level in ("warn", "error"):
            print(f"      fix: {f.fix}")
    summary = {0: "all good", 1: "warnings", 2: "errors"}[code]
    print(f"\n{summary} (exit {code}: 0 ok, 1 warnings, 2 errors)")
    return code

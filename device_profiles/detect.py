"""Hardware detection from a filesystem root (``/`` or a fixture tree with proc/, sys/, dev/).

Rules per profile (see `DetectionRules`): arch and required CPU flags must hold; profiles with
identity rules (device tree, CPU part, paths, accel drivers, DMI) also need at least one of
those to match. Among matches the highest ``priority`` wins, ties broken by evidence count.
"""

from __future__ import annotations

import platform
from pathlib import Path

import msgspec

from wasmgate.device_profiles.errors import DetectionError
from wasmgate.device_profiles.loader import load_all
from wasmgate.device_profiles.schema import DeviceProfile

_ARCH_ALIASES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


class HostFacts(msgspec.Struct, frozen=True):
    """What detection read from the root; every field is plain data for tests and logs."""

    arch: str
    cpu_flags: frozenset[str]
    cpu_parts: frozenset[str]
    dt_model: str
    dt_compatible: tuple[str, ...]
    dmi: str
    accel_drivers: frozenset[str]


class Detection(msgspec.Struct, frozen=True):
    profile: DeviceProfile
    evidence: list[str]
    facts: HostFacts
    candidates: list[tuple[str, int, list[str]]] = msgspec.field(default_factory=list)


def read_facts(root: Path = Path("/")) -> HostFacts:
    """Read CPU, device-tree, DMI and accelerator facts below ``root``."""
    cpuinfo = _text(root / "proc/cpuinfo")
    flags, parts, arch = _parse_cpuinfo(cpuinfo)
    if not arch and root == Path("/"):
        arch = _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())
    dt = root / "sys/firmware/devicetree/base"
    if not dt.exists():
        dt = root / "proc/device-tree"
    dmi_dir = root / "sys/class/dmi/id"
    dmi = " ".join(_text(dmi_dir / n).strip() for n in ("sys_vendor", "product_name"))
    return HostFacts(
        arch=arch,
        cpu_flags=frozenset(flags),
        cpu_parts=frozenset(parts),
        dt_model=_text(dt / "model").strip("\x00\n "),
        dt_compatible=tuple(c for c in _text(dt / "compatible").split("\x00") if c.strip()),
        dmi=dmi.strip(),
        accel_drivers=frozenset(_accel_drivers(root)),
    )


def detect(root: Path = Path("/"), profiles: list[DeviceProfile] | None = None) -> Detection:
    """Choose the best-matching profile for the machine (or fixture tree) at ``root``."""
    facts = read_facts(root)
    scored = []
    for profile in profiles if profiles is not None else load_all():
        evidence = match(profile, facts, root)
        if evidence is not None:
            scored.append((profile, evidence))
    if not scored:
        raise DetectionError(f"no device profile matches this host (arch {facts.arch or '?'})")
    scored.sort(key=lambda pe: (pe[0].detect.priority, len(pe[1])), reverse=True)
    best, evidence = scored[0]
    candidates = [(p.name, p.detect.priority, ev) for p, ev in scored]
    return Detection(profile=best, evidence=evidence, facts=facts, candidates=candidates)


def match(profile: DeviceProfile, facts: HostFacts, root: Path) -> list[str] | None:
    """Evidence lines if ``profile`` matches, else None."""
    if facts.arch != profile.cpu.arch:
        return None
    rules = profile.detect
    needed = set(profile.cpu.features) | set(rules.cpu_flags)
    if not needed <= facts.cpu_flags:
        return None
    evidence = [f"arch {facts.arch}"]
    if needed:
        evidence.append(f"cpu flags {' '.join(sorted(needed))}")
    identity = _identity_evidence(profile, facts, root)
    if rules.has_identity and not identity:
        return None
    return evidence + identity


def _identity_evidence(profile: DeviceProfile, facts: HostFacts, root: Path) -> list[str]:
    rules = profile.detect
    compatible = facts.dt_compatible
    found = [f"device-tree model {facts.dt_model!r}" for m in rules.dt_model if m in facts.dt_model]
    found += [f"device-tree compatible {c}" for c in rules.dt_compatible if c in compatible]
    found += [f"CPU part {p}" for p in rules.cpu_parts if p in facts.cpu_parts]
    found += [f"DMI {facts.dmi!r}" for d in rules.dmi_product if facts.dmi and d in facts.dmi]
    found += [f"accel driver {d}" for d in rules.accel_drivers if d in facts.accel_drivers]
    for pattern in rules.paths:
        hits = sorted(root.glob(pattern))
        if hits:
            found.append(f"path /{hits[0].relative_to(root).as_posix()}")
    return found


def _parse_cpuinfo(text: str) -> tuple[set[str], set[str], str]:
    flags: set[str] = set()
    parts: set[str] = set()
    arch = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "flags":
            flags.update(value.split())
            arch = "x86_64"
        elif key == "features":
            flags.update(value.split())
            arch = arch or "aarch64"
        elif key == "cpu part":
            parts.add(value.strip().lower())
    return flags, parts, arch


def _accel_drivers(root: Path) -> set[str]:
    drivers: set[str] = set()
    for node in sorted((root / "sys/class/accel").glob("accel*")):
        link = node / "device/driver"
        if link.is_symlink():
            drivers.add(Path(link.readlink()).name)
        elif link.is_file():
            drivers.add(_text(link).strip())
    return drivers


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""

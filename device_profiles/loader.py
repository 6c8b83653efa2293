"""Loading packaged profiles (``*.toml`` next to this module) or a profile file by path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from wasmgate._compat import tomllib
from wasmgate.device_profiles.errors import InvalidProfile, ProfileNotFound
from wasmgate.device_profiles.schema import DeviceProfile
from wasmgate.typed import Invalid, convert

_PACKAGE = "wasmgate.device_profiles"


def list_profiles() -> list[str]:
    """Names of every packaged profile, sorted."""
    root = resources.files(_PACKAGE)
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in root.iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    )


def load_profile(name_or_path: str | Path) -> DeviceProfile:
    """A packaged profile by name, or a profile file by path (anything with a `/` or `.toml`)."""
    text, origin = _read(name_or_path)
    return parse_profile(text, origin)


def load_all() -> list[DeviceProfile]:
    """Every packaged profile, validated."""
    return [load_profile(name) for name in list_profiles()]


def parse_profile(text: str, origin: str = "<string>") -> DeviceProfile:
    """Validate TOML text as a profile; errors name the origin and the offending field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidProfile(f"{origin}: not valid TOML: {e}") from e
    try:
        # Lenient (strict=False) as profiles always were: `threads = "4"` is 4. TOML's own
        # types keep the rest honest, and anything that does not convert is still refused.
        return convert(data, DeviceProfile, strict=False, whole="(top)")
    except Invalid as e:  # the first problem only: "where: what"
        raise InvalidProfile(f"{origin}: {e}") from e


def _read(name_or_path: str | Path) -> tuple[str, str]:
    as_text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in as_text or as_text.endswith(".toml"):
        path = Path(name_or_path)
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except FileNotFoundError as e:
            raise ProfileNotFound(f"no profile file at {path}") from e
        except OSError as e:
            raise InvalidProfile(f"{path}: cannot read: {e}") from e
    if as_text not in list_profiles():
        known = ", ".join(list_profiles())
        raise ProfileNotFound(f"no device profile named {as_text!r} (known: {known})")
    entry = resources.files(_PACKAGE).joinpath(f"{as_text}.toml")
    return entry.read_text(encoding="utf-8"), f"{as_text}.toml"

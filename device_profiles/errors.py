"""Device-profile errors. This package imports only msgspec, `wasmgate.typed` and the stdlib."""


class ProfileError(Exception):
    """Root of every error raised by `wasmgate.device_profiles`."""


class ProfileNotFound(ProfileError):
    """No packaged profile has that name and no file exists at that path."""


class InvalidProfile(ProfileError):
    """A profile file is not valid TOML or does not match the schema; the message says where."""


class DetectionError(ProfileError):
    """Hardware detection could not choose any profile (no generic profile for this arch)."""

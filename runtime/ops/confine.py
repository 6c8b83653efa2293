"""What a data-plane worker keeps of the machine, given up right after it reads its spec.

A worker serves requests and runs guests and models; it installs nothing, signs nothing and
holds no key but the TLS one it serves with. So before it loads a bundle it gives up:

- privileges: ``PR_SET_NO_NEW_PRIVS`` (no ``execve`` gains any) and, when it runs as root,
  every capability, the bounding set included;
- the filesystem (Landlock, where the kernel has it): it reads the code it runs (the system
  libraries, Python, wasmgate), a few files of ``/etc``, ``/proc`` and ``/sys``, the bundle
  folder, the trust and config files and its TLS files; it reads and writes the state and
  cache folders and the supervisor's run folder. Everything else fails with EACCES,
  whatever the file's mode: the data folder (the demo's signing key lives there), key files
  beside the config, a symlink or hard link to them, ``/proc/<supervisor>/root/...``;
  NPU and GPU device nodes stay usable; disks and the rest of ``/dev`` do not;
- system calls it never makes (``seccomp``): tracing and reading other processes,
  namespaces and mounts, kernel modules, keyrings, io_uring, userfaultfd, eBPF, perf
  events (`wasmgate.runtime.ops.seccomp`);
- on Landlock ABI 4+, binding TCP ports but its gRPC port and an ephemeral one (it accepts
  HTTP on the socket it inherits, binds its own gRPC listener, and its MQTT client binds
  before it connects); on ABI 6+,
  signals to and abstract Unix sockets of processes outside it (the supervisor, the other
  workers). Landlock also keeps it from ``ptrace`` and ``/proc/<pid>/mem`` of any process
  outside it, so the supervisor's memory stays out of reach.

A kernel without Landlock (older than 5.13, or ``lsm=`` without it) keeps the first part;
the worker logs that once and serves.
"""

from __future__ import annotations

import logging
import os
import platform
import ssl
import sys
from pathlib import Path

from wasmgate.runtime.ops import landlock, seccomp
from wasmgate.runtime.ops.config import Settings

__all__ = ["confine_worker", "worker_rules"]

log = logging.getLogger("wasmgate.confine")

_SYSTEM_CODE = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "os-release",
    "mime.types", "hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
    "services", "protocols", "passwd", "group", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates", "ca-certificates.conf", "pki/tls/certs", "pki/ca-trust",
)  # fmt: skip
"""What libc, OpenSSL and Python read in ``/etc`` (not ``/etc/ssl/private``)."""
_DEVICES = ("null", "zero", "full", "random", "urandom")
_ACCELERATORS = ("accel", "dri", "bus/usb", "galcore", "kfd", "nvmap", "apex_*", "nvhost-*",
                 "nvidia*")  # fmt: skip
"""NPU and GPU device nodes (Edge TPU over PCIe or USB, i.MX, Jetson, Mali, AMD): what
the unit's ``DeviceAllow=`` lets in stays usable; disks and the rest of /dev do not."""


def confine_worker(settings: Settings, run_dir: Path, config: str | None) -> None:
    """Confine this process (one thread only: what it starts later inherits it); ``config``
    is the config file's path, which a reload reads again."""
    threads = sum(1 for _ in Path("/proc/self/task").iterdir())
    if threads != 1:  # a thread running already would stay unconfined
        raise RuntimeError(f"a worker confines itself with one thread, not {threads}")
    landlock.no_new_privs()
    landlock.drop_capabilities()
    if not seccomp.deny():
        log.warning("no system call filter for %s: the unit's applies", platform.machine())
    abi = landlock.abi_version()
    if abi == 0:
        log.warning(
            "this kernel has no Landlock: the worker keeps the file access of its user "
            "(no new privileges, no capabilities and the system call filter still hold)"
        )
        return
    worker_rules(settings, run_dir, None if config is None else Path(config), abi).restrict()
    log.debug("confined", extra={"landlock_abi": abi})


def worker_rules(
    settings: Settings, run_dir: Path, config: Path | None, abi: int
) -> landlock.Rules:
    """The paths a worker keeps, with their rights (see the module docstring)."""
    rules = landlock.Rules(abi)
    _system(rules, shared_memory=settings.shared_memory.enabled)
    _drop_above(rules, settings.paths.data_dir)
    paths, http, mqtt = settings.paths, settings.http, settings.mqtt
    rules.allow(paths.resolved("bundle_dir"), landlock.DIR_READ)
    profile = _profile_file(settings.profile)
    read = (paths.resolved_trust_file(), config, http.tls_cert, http.tls_key,
            mqtt.tls_ca, mqtt.tls_cert, mqtt.tls_key,  # a worker's own broker connection
            settings.cloud.tls_ca, settings.registry.ca, profile)  # fmt: skip
    for file in (f for f in read if f is not None):
        rules.allow(file, landlock.FILE_READ)
    for folder in (paths.resolved("state_dir"), paths.resolved("cache_dir"), run_dir):
        rules.allow(folder, landlock.DIR_WRITE)
    if settings.store.path is not None:  # SQLite writes its -wal and -shm files beside it
        rules.allow(settings.store.path.parent, landlock.DIR_WRITE)
    rules.allow_bind(0)  # its MQTT connection's socket (paho binds it to an ephemeral port)
    if settings.grpc.port is not None:
        rules.allow_bind(settings.grpc.port)  # its own gRPC listener (SO_REUSEPORT)
    return rules


def _system(rules: landlock.Rules, *, shared_memory: bool) -> None:
    """The code, what libc, OpenSSL and Python read, and the devices a worker uses."""
    for code in _code_roots():
        rules.allow(code, landlock.CODE)
    for name in (*(f"/etc/{n}" for n in _ETC), *_ca_paths(), "/proc", "/sys"):
        rules.allow(Path(name), landlock.DIR_READ)
    resolver = Path("/etc/resolv.conf")
    if resolver.is_symlink():  # a resolver's own folder (/run/systemd/resolve): it replaces
        rules.allow(resolver.resolve().parent, landlock.DIR_READ)  # the file on each change
    for device in _DEVICES:
        rules.allow(Path("/dev") / device, landlock.FILE_WRITE)
    for pattern in _ACCELERATORS:
        for node in Path("/dev").glob(pattern):
            rules.allow(node, landlock.DEVICE)
    if shared_memory:  # regions the clients made, mapped read-write
        rules.allow(Path("/dev/shm"), landlock.FILE_WRITE | landlock.READ_DIR)  # noqa: S108


def _code_roots() -> set[Path]:
    """Where the code this interpreter may still import or run lives: the system, Python's
    prefixes, the site folders, and wasmgate's own files wherever they really are (an
    editable install's are symlinks into the source tree)."""
    roots = {Path(p) for p in _SYSTEM_CODE}
    roots |= {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots.add(Path(sys.executable).resolve().parent)
    roots |= {Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    import wasmgate  # noqa: PLC0415 - the package's own location

    for folder in wasmgate.__path__:
        entries = [e.resolve() for e in Path(folder).iterdir() if e.name != "__pycache__"]
        real = [e.parent if e.is_file() else e for e in entries]
        roots |= {Path(folder), Path(os.path.commonpath(real))} if real else {Path(folder)}
    return roots


def _drop_above(rules: landlock.Rules, data_dir: Path) -> None:
    """No rule so far may hold the data folder (its keys): a Python installed above it, or
    a site folder that is its parent, loses its rule rather than open the keys."""
    data = data_dir.resolve()
    for path in list(rules.paths):
        if data.is_relative_to(path.resolve()):
            log.warning("not granted to workers: %s holds the data folder %s", path, data_dir)
            del rules.paths[path]


def _ca_paths() -> list[str]:
    found = ssl.get_default_verify_paths()
    names = (found.cafile, found.capath, found.openssl_cafile, found.openssl_capath)
    extra = (os.environ.get(found.openssl_cafile_env), os.environ.get(found.openssl_capath_env))
    return [n for n in (*names, *extra) if n]


def _profile_file(profile: str | None) -> Path | None:
    """A profile given as a file (anything with a ``/`` or ``.toml``, as the loader reads it)."""
    if profile is None or ("/" not in profile and not profile.endswith(".toml")):
        return None
    return Path(profile)

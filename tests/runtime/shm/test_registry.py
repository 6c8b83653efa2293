"""The registry's own rules, without a daemon: who may call, names, caps, leases."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from wasmgate.runtime.errors import BadRequest, ConfigError, Forbidden, Unauthorized
from wasmgate.runtime.grpc.peer import peer_address
from wasmgate.runtime.ops.config import settings_from
from wasmgate.runtime.ops.config_shm import SharedMemorySettings
from wasmgate.runtime.shm.attach import Attachment
from wasmgate.runtime.shm.region import object_name
from wasmgate.runtime.shm.registry import Regions, is_loopback

ON = SharedMemorySettings(enabled=True, max_regions=2, max_region_bytes=8192)


@pytest.fixture
def shm_key() -> Iterator[str]:
    """An 8 KiB object under /dev/shm, removed after."""
    name = f"wg-unit-{os.getpid()}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(8192))
    try:
        yield f"/{name}"
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("peer", "local"),
    [
        ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
        ("::ffff:127.0.0.1", True), ("192.168.1.20", False), ("::ffff:10.0.0.1", False),
        ("fe80::1", False), ("", False), (None, False), ("localhost", False),
    ],
)  # fmt: skip
def test_only_loopback_peers_are_local(peer: str | None, local: bool) -> None:
    assert is_loopback(peer) is local


def test_a_remote_peer_is_refused_whatever_it_sends() -> None:
    regions = Regions(SharedMemorySettings(enabled=True, token="t"))
    with pytest.raises(Forbidden, match=r"for local clients only; 192\.168\.1\.20 is not a loop"):
        regions.allow("192.168.1.20", "Bearer t")
    with pytest.raises(Unauthorized):
        regions.allow("127.0.0.1", "Bearer wrong")
    with pytest.raises(Unauthorized):
        regions.allow("127.0.0.1", None)
    regions.allow("127.0.0.1", "bearer t")
    with pytest.raises(Forbidden, match="is off"):
        Regions(SharedMemorySettings()).allow("127.0.0.1", None)


class _Context:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@pytest.mark.parametrize(
    ("peer", "address"),
    [("ipv4:127.0.0.1:5000", "127.0.0.1"), ("ipv6:[::1]:5000", "::1"),
     ("unix:/run/x.sock", None), ("", None)],
)  # fmt: skip
def test_grpc_peers(peer: str, address: str | None) -> None:
    assert peer_address(_Context(peer)) == address


@pytest.mark.parametrize("key", ["/", "/.", "/..", "a/b", "/dev/shm/x", "x\x00", "/x y", "//x"])
def test_names_that_are_not_one_posix_object(key: str) -> None:
    with pytest.raises(BadRequest, match="is not a POSIX shared memory name"):
        object_name(key)


def test_a_fifo_is_not_opened_for_ever(shm_key: str) -> None:
    fifo = Path(f"/dev/shm/{shm_key[1:]}-fifo")
    os.mkfifo(fifo)
    try:
        with pytest.raises(BadRequest, match="is not a shared memory object"):
            Regions(ON).register("f", f"{shm_key}-fifo", 0, 4)
    finally:
        fifo.unlink()


def test_region_names_and_counts(shm_key: str) -> None:
    regions = Regions(ON)
    for bad in ("", "a/b", "x" * 257, "sp ace"):
        with pytest.raises(BadRequest, match="shared memory region name"):
            regions.register(bad, shm_key, 0, 4)
    with pytest.raises(BadRequest, match="'byte_size' must be a non-negative integer"):
        regions.register("r", shm_key, 0, -1)
    with pytest.raises(BadRequest, match="'offset' must be a non-negative integer"):
        regions.register("r", shm_key, True, 4)
    assert regions.status() == []


def test_unregister_waits_for_the_requests_using_the_region(shm_key: str) -> None:
    regions = Regions(ON)
    regions.register("r", shm_key, 0, 8192)
    with Attachment(regions, "127.0.0.1", None) as use:
        x = use.input("FP32", [2], {"shared_memory_region": "r", "shared_memory_byte_size": 8}, "x")
        assert regions.unregister("r") == 1  # gone for new requests at once
        with pytest.raises(BadRequest, match="no shared memory region named 'r'"):
            regions.leased("r")
        np.testing.assert_array_equal(x, [0.0, 0.0])  # still mapped for this one
        assert not x.flags.writeable  # inputs are read-only views
    assert regions.unregister("r") == 0  # unknown names are no error, as in Triton


def test_an_input_is_a_view_of_the_mapping_not_a_copy(shm_key: str) -> None:
    """Mapped once at register: the array a model gets shows the object's bytes as they are
    (the client writes, the same array sees it), and it cannot write them."""
    regions = Regions(ON)
    regions.register("r", shm_key, 4096, 4096)
    params = {"shared_memory_region": "r", "shared_memory_byte_size": 16,
              "shared_memory_offset": 8}  # fmt: skip
    with Attachment(regions, "::1", None) as use:
        x = use.input("FP32", [4], params, "x")
        with Path(f"/dev/shm/{shm_key[1:]}").open("r+b") as f:
            f.seek(4096 + 8)
            f.write(np.array([1.5, np.nan, -np.inf, 7], dtype="<f4").tobytes())
        np.testing.assert_array_equal(x, [1.5, np.nan, -np.inf, 7])
        with pytest.raises(ValueError, match="read-only"):
            x[0] = 0
    regions.close()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"max_regions": 0}, "shared_memory.max_regions: Expected `int` >= 1"),
        ({"max_regions": 5000}, "shared_memory.max_regions: Expected `int` <= 1024"),
        ({"max_region_bytes": 0}, "shared_memory.max_region_bytes: Expected `int` >= 1"),
        ({"enabled": "yes"}, "shared_memory.enabled: Expected `bool`"),
        ({"tokens": "x"}, "shared_memory.tokens: unknown key"),
    ],
)
def test_config_keys_are_checked_like_every_other(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from({"shared_memory": table}, "config.toml")
    assert str(err.value).startswith(f"config.toml: {message}")

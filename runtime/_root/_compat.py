"""What the package uses of Python 3.11's standard library, on 3.10 too (JetPack 6's Python).

The one place with version checks: modules import these names from here. On 3.11 and later
they are the standard library's own objects and no backport is imported; on 3.10 they come
from the backports pyproject.toml installs there only (``taskgroup`` is CPython 3.12's
``TaskGroup`` and ``timeout``, with the task ``uncancel`` they rely on). mypy checks the
package as 3.10 (pyproject), so a 3.11-only name used elsewhere is an error.

``TaskGroup``, ``timeout``, ``tomllib`` and ``file_digest`` are imported on first use
(PEP 562): importing this module loads nothing the importer did not load before, so a
command that never waits on asyncio does not pay for its import (~50 ms).
"""

from __future__ import annotations

import sys
from datetime import timezone
from typing import TYPE_CHECKING, BinaryIO

__all__ = [
    "UTC",
    "Self",
    "StrEnum",
    "TaskGroup",
    "dataclass_transform",
    "file_digest",
    "timeout",
    "tomllib",
]

UTC = timezone.utc  # what 3.11's datetime.UTC is

if sys.version_info >= (3, 11):
    from enum import StrEnum
    from typing import Self, dataclass_transform

    if TYPE_CHECKING:  # __getattr__ below imports them
        from asyncio import TaskGroup, timeout
        from hashlib import file_digest

        import tomllib

    _LAZY = {
        "TaskGroup": ("asyncio", "TaskGroup"),
        "timeout": ("asyncio", "timeout"),
        "tomllib": ("tomllib", ""),
        "file_digest": ("hashlib", "file_digest"),
    }
else:
    from enum import Enum

    from typing_extensions import Self, dataclass_transform

    if TYPE_CHECKING:
        from hashlib import _Hash

        import tomli as tomllib
        from taskgroup import TaskGroup, timeout

    _LAZY = {
        "TaskGroup": ("taskgroup", "TaskGroup"),
        "timeout": ("taskgroup", "timeout"),
        "tomllib": ("tomli", ""),
    }

    class StrEnum(str, Enum):
        """3.11's: a member is its value, in ``str()`` and f-strings too."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(self, spec)

    def file_digest(fileobj: BinaryIO, digest: str) -> _Hash:
        import hashlib  # noqa: PLC0415 - only where it is used, as on 3.11

        h = hashlib.new(digest)
        while chunk := fileobj.read(1 << 18):
            h.update(chunk)
        return h


if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        try:
            module, attr = _LAZY[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        value = __import__(module)
        if attr:
            value = getattr(value, attr)
        globals()[name] = value  # once: later lookups find the name itself
        return value

"""Run by tests/test_pythons.py with each supported Python (``python -c <this file>``): what
``wasmgate._compat`` promises, checked where 3.10 differs. Prints one JSON object.

It must run on 3.10 itself: only the standard library of 3.10 and wasmgate's names.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import wasmgate._compat  # noqa: F401 - imported alone first: what does it load?

# Importing _compat loads none of what it hands out lazily (a CLI command skips asyncio).
EAGER = sorted(m for m in ("asyncio", "taskgroup", "tomllib", "tomli") if m in sys.modules)

import asyncio  # noqa: E402 - after the check above
import hashlib  # noqa: E402
import io  # noqa: E402

from wasmgate._compat import StrEnum, TaskGroup, file_digest, timeout, tomllib  # noqa: E402
from wasmgate.runtime.ops.tasks import wake_or_timeout  # noqa: E402


class Color(StrEnum):
    RED = "red"


async def timed_out() -> str:
    """The class timeout() raises: the builtin TimeoutError (3.10's asyncio has its own)."""
    try:
        async with timeout(0.01):
            await asyncio.sleep(5)
    except TimeoutError as e:
        return f"{type(e).__module__}.{type(e).__name__}"
    return "no timeout"


async def cancelled_from_outside() -> str:
    """A cancel from outside passes through timeout() as a cancel, not as a timeout."""

    async def inner() -> None:
        async with timeout(10):
            await asyncio.sleep(10)

    task = asyncio.create_task(inner())
    await asyncio.sleep(0)  # one loop turn: the task runs into its sleep inside timeout()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
    except BaseException as e:
        return type(e).__name__
    return "returned"


async def grouped() -> list[Any]:
    """A failing task of a TaskGroup: an ExceptionGroup holding its error."""

    async def boom() -> None:
        raise ValueError("boom")

    try:
        async with TaskGroup() as group:
            group.create_task(boom())
    except Exception as e:
        inner = getattr(e, "exceptions", ())
        return [type(e).__name__, [type(x).__name__ for x in inner]]
    return ["no error", []]


async def dropped_cancels() -> list[int]:
    """Loop turns after ``set()`` in which a cancel of wake_or_timeout was lost (gh-86296)."""
    dropped = []
    for turns in range(4):
        wake = asyncio.Event()
        task = asyncio.create_task(wake_or_timeout(wake, 60))
        await asyncio.sleep(0)
        wake.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        asked = task.cancel()
        await asyncio.wait([task], timeout=5)
        if not task.done() or task.cancelled() != asked:
            dropped.append(turns)
    return dropped


async def probe() -> dict[str, Any]:
    return {
        "timeout": await timed_out(),
        "outer_cancel": await cancelled_from_outside(),
        "group": await grouped(),
        "dropped_cancels": await dropped_cancels(),
    }


def stdlib_own() -> bool:
    """Whether the names are the standard library's own objects (3.11+; 3.10 has none)."""
    return (
        timeout is getattr(asyncio, "timeout", None)
        and TaskGroup is getattr(asyncio, "TaskGroup", None)
        and file_digest is getattr(hashlib, "file_digest", None)
        and tomllib is sys.modules.get("tomllib")
    )


def main() -> None:
    result = asyncio.run(probe())
    data = b"wasmgate"
    result.update(
        eager=EAGER,
        compat=sys.modules["wasmgate._compat"].__file__,
        str=str(Color.RED),
        format=f"{Color.RED}|{Color.RED:>5}",
        toml=tomllib.loads('a = 1\nb = "x"'),
        digest=file_digest(io.BytesIO(data), "sha256").digest() == hashlib.sha256(data).digest(),
        stdlib_own=stdlib_own(),
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

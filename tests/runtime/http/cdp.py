"""Headless Chromium driven over the DevTools protocol: open a page at a given width, wait
until its script says it rendered, run a measuring script in it, take a full-page picture.

`--dump-dom` shows what the page wrote, not how it is laid out; layout defects (a value
wrapped one character per line, white text on a white badge, a page 3000 px tall) only
show in the rendered geometry and computed styles, which this reads.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

PROBE = (Path(__file__).parent / "probe.js").read_text()
LOADED = "document.body.dataset.state === 'loaded'"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Headless Chromium on a closed network (without the last four it tries Google's hosts)."""
FLAGS = (*CHROMIUM_FLAGS, "--hide-scrollbars")


class Page:
    """One page target's DevTools session."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        async for msg in self._ws:
            doc = json.loads(msg.data)
            if doc.get("id") != ident:
                continue  # an event, or the answer to another call
            if "error" in doc:
                raise RuntimeError(f"{method}: {doc['error']}")
            result: dict[str, Any] = doc["result"]
            return result
        raise RuntimeError(f"{method}: DevTools connection closed")

    async def evaluate(self, expression: str) -> Any:
        reply = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"script failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def open(self, url: str, width: int, ready: str, timeout: float = 60) -> None:
        """Navigate at ``width`` px and wait until ``ready`` (an expression) is true."""
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=900, deviceScaleFactor=1, mobile=width < 600,
        )  # fmt: skip
        await self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        check = f"(() => {{ try {{ return Boolean({ready}); }} catch (e) {{ return false; }} }})()"
        while not await self.evaluate(check):  # false, too, while the document is replaced
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: {ready} not true after {timeout}s")
            await asyncio.sleep(0.05)

    async def screenshot(self, path: Path) -> None:
        """The whole page (not only the viewport) as a PNG."""
        size = await self.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
        )
        clip = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        shot = await self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip
        )
        path.write_bytes(base64.b64decode(shot["data"]))


async def _port(profile: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """Chromium writes the DevTools port it picked into ``DevToolsActivePort``."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited {proc.returncode}")
        if marker.exists() and (text := marker.read_text().split()):
            return int(text[0])
        await asyncio.sleep(0.05)
    raise TimeoutError("chromium did not open its DevTools port")


@asynccontextmanager
async def chromium_page(tmp_path: Path) -> AsyncIterator[Page]:
    """A fresh headless Chromium (own profile, loopback DevTools port) and its first page."""
    binary = shutil.which("chromium")
    assert binary is not None, "install Debian's chromium: apt-get install -y chromium"
    profile = tmp_path / f"chromium-{time.monotonic_ns()}"
    command = [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
               "about:blank"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = await _port(profile, proc)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as reply:
                targets = await reply.json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                yield Page(ws)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def probe(tmp_path: Path, url: str, width: int, shot: Path | None = None) -> dict[str, Any]:
    """The status page at ``url`` measured by probe.js at ``width`` px (and its picture)."""

    async def run() -> dict[str, Any]:
        async with chromium_page(tmp_path) as page:
            await page.open(url, width, LOADED)
            found: dict[str, Any] = await page.evaluate(PROBE)
            if shot is not None:
                await page.screenshot(shot)
            return found

    return asyncio.run(run())

"""Headless Chromium driven over the DevTools protocol (a WebSocket; no WebDriver client needed)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--window-size=1400,1000",
)


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One Chromium process with a fresh profile and one page, driven with DevTools commands."""

    def __init__(self, binary: str, profile: Path):
        self.profile = profile
        profile.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ids = itertools.count(1)
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> Browser:
        port = await self._devtools_port()
        self._session = aiohttp.ClientSession()
        deadline = time.monotonic() + 30
        while True:
            async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
                pages = [t for t in await response.json() if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        self._ws = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Network.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    async def _devtools_port(self) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            if marker.exists():
                first = marker.read_text().splitlines()[:1]
                if first and first[0].isdigit():
                    return int(first[0])
            await asyncio.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port")

    async def send(self, method: str, **params: Any) -> dict:
        """Send one command and return its result (events arriving meanwhile are skipped)."""
        assert self._ws is not None
        ident = next(self._ids)
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = await asyncio.wait_for(self._ws.receive(), timeout=60)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"DevTools connection closed: {message.type}")
            data = json.loads(message.data)
            if data.get("id") == ident:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data.get("result") or {}

    async def set_cookie(self, url: str, name: str, value: str) -> None:
        await self.send("Network.setCookie", url=url, name=name, value=value, httpOnly=True, sameSite="Lax")

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 20) -> Any:
        """Evaluate until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still falsy after {timeout}s: {expression}")
            await asyncio.sleep(0.2)

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}")

    async def screenshot(self, path: Path) -> None:
        result = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        await asyncio.to_thread(_write, path, base64.b64decode(result["data"]))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")

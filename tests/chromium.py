"""A small headless-Chromium driver over the DevTools protocol (a websocket, through aiohttp),
for the report.html browser test and benchmarks/report_html.py.

Debian's `chromium` package is enough (`apt-get install -y chromium`); nothing is downloaded.
The browser runs in its own process group with a fresh profile folder and is killed with it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--window-size=1400,1000")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(RuntimeError):
    pass


class Page:
    """One tab: `send` a DevTools command, `evaluate` JavaScript, collect events."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            fut = self._waiting.pop(data.get("id", -1), None)
            if fut is not None and not fut.done():
                if "error" in data:
                    fut.set_exception(CdpError(str(data["error"])))
                else:
                    fut.set_result(data.get("result", {}))
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        i = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[i] = fut
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        return await asyncio.wait_for(fut, timeout)

    async def evaluate(self, expression: str, timeout: float = 30) -> Any:
        res = await self.send("Runtime.evaluate", timeout=timeout, expression=expression, returnByValue=True,
                              awaitPromise=True)
        if "exceptionDetails" in res:
            raise CdpError(f"{expression[:80]!r}: {res['exceptionDetails'].get('exception', {}).get('description')}")
        return res["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30, every: float = 0.01) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = await self.evaluate(expression)
            except CdpError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {expression!r}")
            await asyncio.sleep(every)

    async def close(self) -> None:
        self._reader.cancel()
        await self.ws.close()


class Chromium:
    """`async with Chromium() as browser: page = await browser.page()`."""

    def __init__(self, executable: str | None = None) -> None:
        exe = executable or find_chromium()
        if exe is None:
            raise FileNotFoundError("no chromium executable on PATH")
        self.exe = exe
        self.proc: subprocess.Popen[bytes] | None = None
        self.profile = Path(tempfile.mkdtemp(prefix="guardeval-chromium-"))
        self.session: aiohttp.ClientSession | None = None
        self.port = 0

    async def __aenter__(self) -> Chromium:
        self.proc = subprocess.Popen([self.exe, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.is_file() and active.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before it listened")
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not open its DevTools port in 60 s")
            await asyncio.sleep(0.05)
        self.port = int(active.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        return self

    async def page(self) -> Page:
        assert self.session is not None
        async with self.session.get(f"http://127.0.0.1:{self.port}/json/list") as resp:
            targets = await resp.json()
        target = next(t for t in targets if t.get("type") == "page")
        ws = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        return Page(ws)

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)   # the browser and its helpers: its own group
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


async def load(page: Page, path: Path, timeout: float = 60) -> dict[str, float]:
    """Open a local file and wait for report.html's ready marker. Returns the page's own time to
    ready (performance.now() when the script finished, from navigation start) and the wall time
    from sending the navigation to seeing the marker."""
    await page.send("Page.enable")
    t0 = time.perf_counter()
    await page.send("Page.navigate", url=path.resolve().as_uri())
    await page.wait_for("document.documentElement.dataset.ready === '1'", timeout=timeout)
    wall = time.perf_counter() - t0
    ready_ms = await page.evaluate("window.guardevalReadyMs")
    return {"ready_ms": float(ready_ms), "wall_s": wall}

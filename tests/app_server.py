"""Serving an aiohttp app of a test's own on 127.0.0.1: in the test's event loop (`start`) or
from a background thread for code that runs its own loop or a subprocess (`in_thread`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web


async def start(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Serve `app` on host:port (0: a free port); the runner (to `cleanup()`) and `http://HOST:PORT`."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://{host}:{bound}"


@contextmanager
def in_thread(app: web.Application, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` on a free port from a background thread's loop; yields `http://HOST:PORT`."""
    loop = asyncio.new_event_loop()
    started: list[tuple[web.AppRunner, str]] = []
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        started.append(loop.run_until_complete(start(app, host)))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="test-app-server", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("test server did not start")
    runner, url = started[0]
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()

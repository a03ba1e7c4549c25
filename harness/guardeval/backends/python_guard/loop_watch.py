"""A watchdog for `async def` guards that block the event loop (issue 27).

An `async def` guard runs on the event loop; one that blocks it (`time.sleep`, a blocking HTTP
client called inside an async function) stops everything else too: `timeout_s` is a timer on
that loop, so it never fires, and the loop never reads the signals that would stop the run.

A thread pings the loop (`call_soon_threadsafe`) four times a second. When no ping has been
answered for `timeout_s` + 1 s and the loop's thread is inside a guard call (a frame of
`PythonGuard._call_async` on its stack), the thread interrupts it: a signal to that thread,
whose handler raises `LoopBlocked` there, inside the guard's code. SIGTERM and SIGINT pass a
handler of ours first: one that comes while the loop has been blocked in a guard for a moment
raises `LoopBlocked` at once; one that comes while a guard runs and the loop then does not turn
within half a second gets the interrupt from the thread. Either way the loop, running again,
stops the run on the signal as always. The guard's call fails as `python_blocked_loop`, a
fatal error naming the function and the line it was blocked at: the run stops, resumable, and
the guard is not called again in that session.

A guard that swallows the exception (`except BaseException`) or is blocked in C code that
never returns to Python gets no second chance: 5 s after the interrupt (or after the signal)
the watchdog prints why on stderr and ends the process (`os._exit(1)`), which a run survives
as it survives SIGKILL (every attempt is on disk when it ends; `resume` goes on). Only the
main thread can take Python signal handlers, so the watch runs when the loop does (as it
does under the CLI).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

PING_S = 0.25
GRACE_S = 1.0        # past timeout_s, before a blocked call is interrupted
EXIT_AFTER_S = 5.0   # after an interrupt or a signal the loop did not come back from
INTERRUPT = signal.SIGUSR1
_STOPS = (signal.SIGTERM, signal.SIGINT)


class LoopBlocked(BaseException):
    """Raised inside a guard that blocks the event loop (a BaseException: `except Exception`
    in the guard does not swallow it)."""


class LoopWatch:
    """Started by the first `async def` call (`start`, on the loop's thread), stopped by
    `close` (on the same thread)."""

    def __init__(self, callable_name: str, timeout_s: float, guard_code: CodeType) -> None:
        self.callable_name, self.limit_s, self.guard_code = callable_name, timeout_s + GRACE_S, guard_code
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tid = 0
        self._last = time.monotonic()
        self._pinged = False
        self._why: str | None = None          # set when an interrupt is due: the message it raises
        self._since: float | None = None      # when the interrupt (or the signal) was sent
        self._signalled: tuple[str, float] | None = None   # a stop signal that came while in the guard
        self._saved: dict[int, Any] = {}      # signal -> the handler ours wraps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def can_run() -> bool:
        return threading.current_thread() is threading.main_thread()

    def start(self) -> None:
        if self._thread is not None or not self.can_run():
            return
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            return   # not an asyncio loop: nothing to ping
        self._tid = threading.get_ident()
        self._last = time.monotonic()
        self._install()
        self._thread = threading.Thread(target=self._watch, name="guardeval-loop-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self.can_run():
            for signum, previous in self._saved.items():
                if getattr(signal.getsignal(signum), "__self__", None) is self:
                    signal.signal(signum, previous)
        self._saved.clear()

    # -- on the loop's thread ----------------------------------------------------------------
    def _beat(self) -> None:
        self._last = time.monotonic()
        self._pinged = False
        self._install()   # anyio's signal receiver may have put its own handlers in since

    def _install(self) -> None:
        """Our handler in front of the current one of SIGTERM, SIGINT (when it is Python's)
        and the interrupt signal."""
        for signum in (*_STOPS, INTERRUPT):
            current = signal.getsignal(signum)
            if getattr(current, "__self__", None) is self:
                continue
            if signum in _STOPS and not callable(current):
                continue   # the default action: it ends the process without Python's help
            self._saved[signum] = current
            signal.signal(signum, self._on_interrupt if signum == INTERRUPT else self._on_stop)

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        why = self._why
        if why is not None and self._in_guard(frame) is not None:
            self._why = None
            raise LoopBlocked(why)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        where = self._in_guard(frame)
        if where is not None:
            now = time.monotonic()
            name = signal.Signals(signum).name
            if now - self._last > 2 * PING_S + 0.1:
                self._since = now
                raise LoopBlocked(self._message(where, f"when {name} came"))
            # In the guard, but the loop turned a moment ago: if it does not turn again soon,
            # the watchdog interrupts the guard for this signal.
            self._signalled = (name, now)
        previous = self._saved.get(signum)
        if callable(previous):
            previous(signum, frame)

    # -- the watchdog thread -----------------------------------------------------------------
    def _watch(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stop.wait(PING_S):
            if not self._pinged:
                self._pinged = True
                try:
                    loop.call_soon_threadsafe(self._beat)
                except RuntimeError:
                    return   # the loop is closed
            now = time.monotonic()
            stale = now - self._last
            if self._since is not None:
                if self._last >= self._since:
                    self._since = self._why = self._signalled = None   # the loop came back
                elif now - self._since > EXIT_AFTER_S:
                    self._give_up()
                continue
            signalled = self._signalled
            if signalled is not None and self._last >= signalled[1]:
                signalled = self._signalled = None   # the loop turned since: it reads the signal itself
            if signalled is not None and now - signalled[1] > 2 * PING_S:
                how = f"when {signalled[0]} came"
            elif stale > self.limit_s:
                how = f"for {stale:.0f} s, past timeout_s ({self.limit_s - GRACE_S:g} s)"
            else:
                continue
            if (where := self._in_guard(sys._current_frames().get(self._tid))) is not None:
                self._why = self._message(where, how)
                self._since = now
                signal.pthread_kill(self._tid, INTERRUPT)

    def _give_up(self) -> None:
        where = self._in_guard(sys._current_frames().get(self._tid)) or "an unknown place"
        text = (f"guardeval: {self.callable_name} still blocks the event loop ({where}) {EXIT_AFTER_S:g} s after "
                "it was interrupted; ending the process now. Every finished attempt is on disk: fix the "
                "guard, then `guardeval resume RUN` goes on.\n")
        try:
            os.write(2, text.encode("utf-8", "replace"))
        finally:
            os._exit(1)

    # -- where the loop is ------------------------------------------------------------------
    def _in_guard(self, frame: FrameType | None) -> str | None:
        """`function at file:line` of the innermost frame, when the frame's stack holds a guard
        call (`PythonGuard._call_async`); None otherwise."""
        innermost, depth = frame, 0
        while frame is not None and depth < 400:
            if frame.f_code is self.guard_code:
                assert innermost is not None
                code = innermost.f_code
                return f"in {code.co_name[:80]} at {os.path.basename(code.co_filename)[:120]}:{innermost.f_lineno}"
            frame, depth = frame.f_back, depth + 1
        return None

    def _message(self, where: str, how: str) -> str:
        return (f"{self.callable_name} blocked the event loop {how} ({where}): an `async def` guard must await, "
                "never block (a blocking HTTP client or time.sleep inside it stops every call, the timeout and "
                "the signals); use an async client, or make it a plain `def` (it then runs on a thread)")

"""The worker threads that run a python guard's plain function (`isolation = "thread"`, issue 40).

At most `size` threads, each started when a call first needs it and kept for the run, so what
the function keeps per thread (`threading.local`: a compiled policy that is not thread-safe, an
HTTP session, a tokenizer) is built once per worker, not once per call. A thread cannot be
stopped: one whose call the loop stops waiting for (past `timeout_s`, or cancelled) is
*abandoned*: it leaves the pool at once (a fresh thread takes its place when one is needed),
runs the function to its end, drops the result and exits. `abandoned` counts those still
running, for the guard's cap on them. `close` (at the end of the run) ends the idle threads and
waits for them; a busy one ends when its call returns. All are daemon threads: none keeps the
process from exiting.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from guardeval.backends.errors import AttemptError
from guardeval.backends.python_guard.output import Capture

THREAD_NAME = "guardeval-python-guard"
CLOSE_WAIT_S = 5.0       # for idle threads to end at `close` (they end at once)


class Job:
    """One call of the function: run on a worker thread, awaited on the event loop."""

    def __init__(self, fn: Callable[[Any], Any], arg: Any, capture: Capture,
                 convert: Callable[[BaseException], AttemptError]) -> None:
        self.fn, self.arg, self.capture, self.convert = fn, arg, capture, convert
        self.done = anyio.Event()
        self.token = anyio.lowlevel.current_token()
        self.value: Any = None
        self.error: AttemptError | None = None
        self.finished = False      # both flags are read and set under the pool's lock
        self.abandoned = False

    def run(self) -> None:
        """On the worker thread; never raises."""
        token = self.capture.enter()   # what this thread prints while the call runs is this attempt's
        try:
            self.value = self.fn(self.arg)
        except BaseException as exc:  # noqa: BLE001 - everything a guard raises is recorded, not raised here
            # Converted here, in the thread: the traceback (and the frames' locals) goes with `exc`.
            self.error = self.convert(exc)
        finally:
            Capture.leave(token)
            self.arg = None   # an abandoned call's input is not kept until it returns

    def notify(self) -> None:
        try:
            anyio.from_thread.run_sync(self.done.set, token=self.token)
        except Exception:  # noqa: BLE001 - the loop is gone: nobody waits any more
            pass


class _Worker:
    def __init__(self, pool: ThreadWorkers, number: int) -> None:
        self.pool = pool
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"{THREAD_NAME}-{number}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        pool = self.pool
        while (job := self.jobs.get()) is not None:
            job.run()
            with pool.lock:
                job.finished = True
                if job.abandoned:
                    pool.abandoned -= 1
                    return            # it left the pool when it was abandoned
                if pool.closed:
                    pool.live -= 1
                    return
                # Back in the pool before the loop hears of it: the next call finds it idle.
                pool.idle.append(self)
            job.notify()


class ThreadWorkers:
    """At most `size` worker threads in the pool (abandoned ones not counted: see `abandoned`).
    Callers keep at most `size` calls in flight (the guard's limiter)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.live = 0          # threads in the pool, idle or busy
        self.abandoned = 0     # threads that left it still running a call past its timeout
        self.closed = False
        self._numbers = itertools.count(1)

    async def run(self, job: Job, timeout_s: float) -> bool:
        """Run `job` on a worker; False when it was abandoned at `timeout_s` (its result is
        dropped). Cancelled, it is abandoned too, and the cancellation goes on."""
        with self.lock:
            if self.idle:
                worker = self.idle.pop()
            else:
                assert self.live < self.size, "more calls in flight than worker threads"
                self.live += 1
                worker = None
        if worker is None:
            try:
                worker = _Worker(self, next(self._numbers))
            except BaseException:   # no thread could start (RuntimeError): the slot stays free
                with self.lock:
                    self.live -= 1
                raise
        worker.jobs.put(job)
        try:
            with anyio.move_on_after(timeout_s):
                await job.done.wait()
        finally:
            with self.lock:
                if not job.finished:
                    job.abandoned = True
                    self.live -= 1
                    self.abandoned += 1
        return not job.abandoned

    def close(self) -> None:
        """End the idle threads and wait for them; busy ones end when their call returns."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
            self.live -= len(idle)
        for worker in idle:
            worker.jobs.put(None)
        for worker in idle:
            worker.thread.join(CLOSE_WAIT_S)

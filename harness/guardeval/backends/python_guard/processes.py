"""The worker processes of a python guard (`isolation = "process"`, issue 40): the harness's side.
What runs in them is `worker.py`.

At most `size` workers, each started when a call first needs it and kept for the run: a fresh
interpreter (`sys.executable`, the harness's environment, working folder and import path) that
imports the guard's module once and then answers one call at a time. Unlike a thread, a worker
can be stopped: one whose call is not answered within `timeout_s`, or whose call is cancelled
(SIGTERM, a fatal error elsewhere), is killed with its whole process group (SIGKILL: a child the
guard started goes with it) and reaped; a fresh worker takes its place when a call needs one. A
worker that dies during a call (a segfault, `os._exit`) is reaped and the call is told how it
ended; one whose answer is not for the call and attempt asked, or not from its own pid (a copy
the guard forked), is killed and the attempt fails the same way (`ProtocolError`). A worker that
does not finish starting within `start_timeout_s` (a module whose import blocks) is killed and
the run stops. `close` (at the end of the run) closes the idle workers' request pipes, which
ends them, kills any still there a moment later, and kills every worker's group.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop one call, and one worker that
dies breaks the whole pool, failing every call in flight; nor anyio's `to_process`, which
cannot say how a worker ended and shares its workers between every guard of the event loop.
Workers are started with `anyio.open_process` (no fork of this multi-threaded process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from guardeval.backends.python_guard.types import GuardInput
from guardeval.backends.python_guard.worker import BOOTSTRAP, HEADER_BYTES, kill_children

REAP_WAIT_S = 5.0      # for a killed worker to be reaped
CLOSE_WAIT_S = 2.0     # for idle workers to end once their stdin is closed, before they are killed
# Errors that mean the worker's pipes are gone: it died, or is dying.
_LOST = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class WorkerLost(Exception):
    """The worker ended during the call; the message says how (`exit_words`)."""


class ProtocolError(WorkerLost):
    """The worker's answer was not one for this call and attempt, from its own pid, in the
    wire's shape: the worker is killed and replaced, and the attempt fails (and is retried) as
    when a worker dies."""


class WorkerStartFailed(Exception):
    """A worker could not start: the guard's module did not import there, or the worker died."""


class SourceChanged(Exception):
    """A worker imported other code than the run's: the module's source changed since launch."""

    def __init__(self, now: str | None) -> None:
        super().__init__(now)
        self.now = now


def exit_words(code: int | None) -> str:
    """How a process ended, in words: `exited with code 3`, `was killed by signal SIGSEGV`."""
    if code is None:
        return "ended (its exit status is unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code}"


class _Worker:
    def __init__(self, proc: anyio.abc.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = BufferedByteReceiveStream(proc.stdout)

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        await self.stdin.send(len(data).to_bytes(HEADER_BYTES, "big") + data)

    async def receive(self, max_bytes: int) -> dict[str, Any]:
        """The next frame, read as JSON (data only: nothing in it runs here); from this worker's
        own pid, or a ProtocolError."""
        n = int.from_bytes(await self.stdout.receive_exactly(HEADER_BYTES), "big")
        if n > max_bytes:
            raise ProtocolError(f"sent a message of {n:,} bytes (at most {max_bytes:,} are read)")
        data = await self.stdout.receive_exactly(n)
        try:
            message = json.loads(data)
        except ValueError:
            raise ProtocolError("sent a message that is not JSON") from None
        if not isinstance(message, dict):
            raise ProtocolError("sent a message that is not a JSON object")
        if message.get("pid") != self.proc.pid:
            raise ProtocolError(f"had a message sent by another process (pid {_short(message.get('pid'))}, the "
                                f"worker is {self.proc.pid}: a copy of it the guard forked?)")
        return message

    async def end(self) -> int | None:
        """Kill it and everything in its group (its watcher, what the guard started); reap it.
        Its exit code (None: not reaped)."""
        if self.proc.returncode is None:   # its children that left its group (setsid) go first
            kill_children(self.proc.pid)
        # The group, even when the worker itself has ended: what the guard started goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with anyio.move_on_after(REAP_WAIT_S, shield=True):
            await self.proc.wait()
        if self.proc.returncode is None:   # its group could not be signalled: the process itself
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with anyio.move_on_after(REAP_WAIT_S, shield=True):
            await self.proc.aclose()
        return self.proc.returncode


def _short(value: Any) -> str:
    return repr(value)[:40]


class ProcessWorkers:
    """At most `size` worker processes; callers keep at most `size` calls in flight (the
    guard's limiter)."""

    def __init__(self, callable_name: str, module: str, size: int, *, max_bytes: int,
                 start_timeout_s: float = 60.0) -> None:
        self.callable_name, self.module, self.size = callable_name, module, size
        self.max_bytes = max_bytes                 # the largest return (its JSON) a worker sends
        self.max_message = 2 * max_bytes + (1 << 20)
        self.start_timeout_s = start_timeout_s
        self.idle: list[_Worker] = []
        self.busy: set[_Worker] = set()
        self._attempts = itertools.count(1)

    async def call(self, inp: GuardInput, timeout_s: float, source_sha256: str | None) -> dict[str, Any]:
        """One call on a worker: its answer (worker.py), checked to be for this call and this
        attempt. TimeoutError past `timeout_s` (the worker is killed); WorkerLost when it died
        or broke the protocol (it is killed); WorkerStartFailed, SourceChanged from a worker
        that had to be started for it (its start is bounded by `start_timeout_s`, not
        `timeout_s`)."""
        worker = await self._take(source_sha256)
        attempt = next(self._attempts)
        request = {"call": inp.call_id, "attempt": attempt, "input": dataclasses.asdict(inp)}
        answer: dict[str, Any] | None = None
        self.busy.add(worker)
        try:
            with anyio.move_on_after(timeout_s):
                await worker.send(request)
                answer = await worker.receive(self.max_message)
                if answer.get("call") != inp.call_id or answer.get("attempt") != attempt:
                    raise ProtocolError(f"answered call {_short(answer.get('call'))} attempt "
                                        f"{_short(answer.get('attempt'))} when asked for call {inp.call_id} attempt "
                                        f"{attempt}")
        except (*_LOST, WorkerLost) as exc:
            answer = None
            self.busy.discard(worker)
            with anyio.CancelScope(shield=True):
                code = await worker.end()
            if isinstance(exc, WorkerLost):
                raise
            raise WorkerLost(exit_words(code)) from None
        finally:
            if worker in self.busy:
                self.busy.discard(worker)
                if answer is not None:
                    self.idle.append(worker)
                else:   # cut at timeout_s, or cancelled: stopped for real
                    with anyio.CancelScope(shield=True):
                        await worker.end()
        if answer is None:
            raise TimeoutError
        return answer

    async def _take(self, source_sha256: str | None) -> _Worker:
        while self.idle:
            worker = self.idle.pop()
            if worker.proc.returncode is None:
                return worker
            with anyio.CancelScope(shield=True):   # died while idle: reaped, replaced
                await worker.end()
        return await self._start(source_sha256)

    async def _start(self, source_sha256: str | None) -> _Worker:
        proc = await anyio.open_process([sys.executable, "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=None, start_new_session=True)
        worker = _Worker(proc)
        ready = False
        try:
            answer = None
            with anyio.move_on_after(self.start_timeout_s):
                await worker.send({"path": list(sys.path), "callable": self.callable_name, "module": self.module,
                                   "source_sha256": source_sha256, "max_bytes": self.max_bytes,
                                   "parent": os.getpid()})
                answer = await worker.receive(self.max_message)
            if answer is None:
                raise WorkerStartFailed(f"its worker process did not finish starting within start_timeout_s "
                                        f"({self.start_timeout_s:g} s): importing the module blocks?")
            if answer.get("kind") == "failed":
                raise WorkerStartFailed(str(answer.get("why")))
            if answer.get("kind") == "changed" or answer.get("source_sha256") != source_sha256:
                raise SourceChanged(str(answer.get("source_sha256")) if answer.get("source_sha256") else None)
            if answer.get("kind") != "ready":
                raise WorkerStartFailed(f"its worker process answered {_short(answer.get('kind'))} as it started")
            ready = True
            return worker
        except ProtocolError as exc:
            raise WorkerStartFailed(f"its worker process {exc} as it started") from None
        except _LOST:
            with anyio.CancelScope(shield=True):
                code = await worker.end()
            raise WorkerStartFailed(f"its worker process {exit_words(code)} as it started") from None
        finally:
            if not ready:
                with anyio.CancelScope(shield=True):
                    await worker.end()

    async def close(self) -> None:
        """End every worker: idle ones by closing their request pipe (each then ends what the
        guard started, and itself), any left (busy, or not ending) killed; all reaped, and their
        groups killed."""
        workers, self.idle = [*self.idle, *self.busy], []
        self.busy.clear()
        with anyio.CancelScope(shield=True):
            for worker in workers:
                with contextlib.suppress(*_LOST):
                    await worker.stdin.aclose()
            with anyio.move_on_after(CLOSE_WAIT_S):
                for worker in workers:
                    await worker.proc.wait()
            for worker in workers:
                await worker.end()

"""A python guard's worker process (`isolation = "process"`, issues 40 and 46): the side that
runs the guard. The harness's side is `processes.py`.

Started as `python -c BOOTSTRAP` in a session of its own (its own process group: a terminal's
Ctrl-C goes to the harness, which ends its workers). The harness gives it two pipes as fds 0 and
1; the bootstrap's first act moves them to descriptors of their own (not inherited by anything
the guard starts), puts /dev/null on fd 0 and a capture pipe on fds 1 and 2, so nothing the
guard or its module writes, from Python, C code or a child process, at import or during a call,
can enter the wire. The wire: frames of a 4-byte big-endian length and UTF-8 JSON, both ways
(data only: the harness never unpickles what a guard controls).

* The harness sends `{"path": sys.path, "callable": NAME, "module": M, "source_sha256": S,
  "max_bytes": N, "parent": PID}` (`M`: the module its provenance names, `S`: its source's
  SHA-256 at launch). The worker finds M's source file without importing anything, hashes it
  and, when it is not S, answers `{"kind": "changed", "source_sha256": ...}` without importing
  it; otherwise it imports M from the bytes it hashed (`resolve.import_source`), then the
  callable, and answers `{"kind": "ready", ...}` or `{"kind": "failed", "why": ...}`.
* Then, per call, `{"call": ID, "attempt": N, "input": {GuardInput's fields}}`, answered by one
  frame tagged with the same call and attempt and this worker's pid, ending with what the call
  wrote to fds 1 and 2 (`Capture.record`, unredacted: the harness redacts):
  kind `ok` with `returned` (the type's name) and `value` (a str, or a dict: the documented
  decision shapes, `types.py`); `refused` when the return is none of those or is not JSON
  (`why` names its type); `too_large` when its JSON is over `max_bytes`; `raised` when the
  function raised (`how`: `attempt` for one of guardeval's own errors, with `error`: [class,
  error_class, message, retry_after]; `exception` for an `Exception`; `exit` for `SystemExit`,
  `KeyboardInterrupt`; `said`: its description).
* End of the request pipe ends the worker (the harness closed it, or is gone).

A copy of the worker made by `os.fork()` in the guard (a library's helper) never reads or writes
the wire: the fork closes the wire in the copy, and a copy that comes back to the loop (or a
C-level fork that skipped Python's fork hooks) ends at once. Every answer names the pid that
sent it, so a frame from any other process is a protocol error in the harness.

The worker is the reaper of everything the guard starts (Linux: PR_SET_CHILD_SUBREAPER, so a
daemonised grandchild comes back to it), and the group ends with it: on a clean end the worker
kills its children and its group; a watcher process forked before the guard is imported kills
the group when the worker dies or the harness does (even by SIGKILL: the kernel closes the
harness's end of the answer pipe, which the watcher polls), and the kernel kills the worker
itself when the harness dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import codecs
import contextlib
import inspect
import json
import os
import signal
import sys
import threading
from typing import IO, Any

from guardeval.backends.python_guard.describe import MAX_ERROR_CHARS, describe_exception
from guardeval.backends.python_guard.output import MAX_KEPT_CHARS, STREAMS

HEADER_BYTES = 4
MAX_REQUEST_BYTES = 1 << 30
# The child's first lines: only the standard library until the harness's import path is in place.
# The wire moves off fds 0 and 1 before anything else runs (os.dup: not inherited by children).
BOOTSTRAP = ("import os, json, sys\n"
             "wire_in, wire_out = os.fdopen(os.dup(0), 'rb'), os.fdopen(os.dup(1), 'wb')\n"
             "null = os.open(os.devnull, os.O_RDWR)\n"
             "os.dup2(null, 0)\n"
             "os.dup2(2, 1)\n"
             "os.close(null)\n"
             "start = json.loads(wire_in.read(int.from_bytes(wire_in.read(4), 'big')))\n"
             "sys.path[:] = start['path']\n"
             "from guardeval.backends.python_guard.worker import main\n"
             "main(start, wire_in, wire_out)\n")
# The error classes a guard may raise with a meaning (guardeval.backends.errors), most specific first.
ATTEMPT_CLASSES = ("CallFailed", "FatalError", "GuardError", "TransientError")
_PID = os.getpid()


def main(start: dict[str, Any], wire_in: IO[bytes], wire_out: IO[bytes]) -> None:
    global _PID
    _PID = os.getpid()
    _become_reaper()
    if not _start_watcher(wire_out.fileno()):
        _end_with_parent(int(start["parent"]))
    # A copy forked by the guard drops the wire at once: it can never read a request or answer one.
    os.register_at_fork(after_in_child=lambda: _drop_wire(wire_in, wire_out))
    output = Output()
    try:
        fn, said = _load(str(start["callable"]), str(start["module"]), start.get("source_sha256"))
    except BaseException as exc:  # noqa: BLE001 - a module that fails to import, however it fails
        output.pass_through()
        _send(wire_out, {"kind": "failed", "why": getattr(exc, "message", None) or describe_exception(exc)})
        return _end()
    output.pass_through()
    if fn is None:
        _send(wire_out, {"kind": "changed", "source_sha256": said})
        return _end()
    _send(wire_out, {"kind": "ready", "source_sha256": said})
    call = _caller(fn)
    max_bytes = int(start["max_bytes"])
    from guardeval.backends.python_guard.types import GuardInput

    while (frame := _receive(wire_in)) is not None:
        request = json.loads(frame)
        answer = _answer(call, GuardInput(**request["input"]), max_bytes, output)
        _send(wire_out, {"call": request["call"], "attempt": request["attempt"], **answer})
    _end()


def _drop_wire(*files: IO[bytes]) -> None:
    for f in files:
        with contextlib.suppress(OSError):
            os.close(f.fileno())


def _end_with_parent(parent: int) -> None:
    """Where no watcher runs, the kernel kills this worker when the harness dies (Linux
    PR_SET_PDEATHSIG), even a worker stuck in C code. Elsewhere an idle worker ends when its
    request pipe closes."""
    if _prctl(1, signal.SIGKILL) and os.getppid() != parent:   # the harness died before the line above
        os._exit(1)


def _become_reaper() -> None:
    """Orphans of the guard's children come back to this worker, not to init (Linux), so that
    it can end them."""
    _prctl(36, 1)   # PR_SET_CHILD_SUBREAPER


def _prctl(option: int, arg: int) -> bool:
    if sys.platform != "linux":
        return False
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _start_watcher(answer_fd: int) -> bool:
    """Fork (still single-threaded: nothing of the guard has run) a process that waits for this
    worker to die, or the harness to close its end of the answer pipe (it did, or it is gone,
    even SIGKILLed), and then kills the worker's children (those that left the group too) and
    the whole group: nothing the guard started outlives its worker. False: no watcher (not
    Linux, or no pidfd)."""
    if sys.platform != "linux" or not hasattr(os, "pidfd_open"):
        return False
    worker = os.getpid()
    try:
        pidfd = os.pidfd_open(worker)
        child = os.fork()
    except OSError:
        return False
    if child != 0:
        os.close(pidfd)
        return True
    try:
        import select

        for fd in range(3, 1024):   # the wire, and anything else: only these two are watched
            if fd not in (pidfd, answer_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
        poll = select.poll()
        poll.register(pidfd, select.POLLIN)
        poll.register(answer_fd, select.POLLERR)
        if os.getppid() == worker:
            while not poll.poll():
                pass
        kill_children(worker)
    finally:
        os.killpg(0, signal.SIGKILL)   # this watcher is in the group too: its last act
        os._exit(0)


def children_of(pid: int) -> list[int]:
    """The live children of `pid` (Linux /proc), for ending them."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as f:
            out.extend(int(x) for x in f.read().split())
    return out


def kill_children(pid: int) -> None:
    """SIGKILL every child of `pid`, including those that left its group (setsid); not the
    caller (the watcher is a child of its worker)."""
    for child in children_of(pid):
        if child == os.getpid():
            continue
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def _end() -> None:
    """A clean end: every descendant killed and reaped (the orphans among them came back here),
    then the group, this worker with it."""
    Output.flush()
    for _ in range(64):
        children = children_of(os.getpid())
        if not children:
            break
        kill_children(os.getpid())
        for child in children:
            with contextlib.suppress(OSError):
                os.waitpid(child, 0)
    os.killpg(0, signal.SIGKILL)


def _load(name: str, module: str, expected: str | None) -> tuple[Any, str | None]:
    """(the callable, the SHA-256 of `module`'s source); (None, that SHA-256) when it is not the
    launch's, the module then not imported. The module is imported from the bytes hashed."""
    from guardeval.backends.python_guard import resolve

    found = resolve.read_source(module)
    if found is not None:
        path, data, sha256 = found
        if sha256 != expected:
            return None, sha256
        resolve.import_source(module, path, data)
        return resolve.load(name), sha256
    # Found only by an import hook (an editable install): checked once imported, as before.
    fn = resolve.load(name)
    now = resolve.source_sha256(module)
    return (fn if now == expected else None), now


def _caller(fn: Any) -> Any:
    """`fn` as a plain function: an `async def` one runs on this worker's own loop."""
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
        return fn
    import asyncio  # only then: it is a tenth of a worker's start-up

    loop = asyncio.new_event_loop()
    return lambda inp: loop.run_until_complete(fn(inp))


class Output:
    """Fds 1 and 2 of this worker: pipes drained by a thread. What is written during a call
    (from Python, C code or a child process) is that call's, bounded like thread mode's
    `Capture`; anything else (import-time banners, a background child) goes to the harness's
    stderr."""

    def __init__(self) -> None:
        self.real_err = os.dup(2)
        self.lock = threading.Lock()
        self.current: dict[str, Any] | None = None
        self.fds: dict[int, str] = {}
        self.decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in STREAMS}
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            self.fds[r] = stream
        # Fresh streams on the pipes: line-buffered, and a lone surrogate printed is escaped, not an error.
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
        threading.Thread(target=self._drain_forever, name="guardeval-worker-output", daemon=True).start()

    def _drain_forever(self) -> None:
        import select

        poll = select.poll()
        for r in self.fds:
            poll.register(r, select.POLLIN)
        while True:
            poll.poll()
            with self.lock:
                if not self._drain(1 << 20):
                    return

    def _drain(self, budget: int = 64 << 20) -> bool:
        """Read what the pipes hold now, at most about `budget` bytes of each (under the lock:
        a child that never stops writing cannot hold it); False once both are closed."""
        live = False
        for r, stream in self.fds.items():
            left = budget
            while left > 0:
                try:
                    data = os.read(r, 1 << 16)
                except BlockingIOError:
                    live = True
                    break
                except OSError:
                    break
                if not data:
                    break
                left -= len(data)
                self._add(stream, data)
            live = live or left <= 0
        return live

    def _add(self, stream: str, data: bytes) -> None:
        if self.current is None:
            with contextlib.suppress(OSError):
                while data:
                    data = data[os.write(self.real_err, data):]
            return
        text = self.decoders[stream].decode(data)
        self.current[f"{stream}_chars"] += len(text)
        kept = self.current[stream]
        if len(kept) < MAX_KEPT_CHARS:
            self.current[stream] = kept + text[:MAX_KEPT_CHARS - len(kept)]

    def begin(self) -> None:
        self.flush()
        with self.lock:
            self._drain()   # what came between calls is nobody's: the harness's stderr
            self.current = {s: "" for s in STREAMS} | {f"{s}_chars": 0 for s in STREAMS}

    def end(self) -> dict[str, Any] | None:
        """What this call wrote (None: nothing), as `Capture.record` has it."""
        self.flush()
        with self.lock:
            self._drain()
            got, self.current = self.current, None
            for d in self.decoders.values():
                d.reset()
        assert got is not None
        out = {k: v for s in STREAMS if got[f"{s}_chars"] for k, v in ((s, got[s]), (f"{s}_chars", got[f"{s}_chars"]))}
        return out or None

    def pass_through(self) -> None:
        self.flush()
        with self.lock:
            self._drain()

    @staticmethod
    def flush() -> None:
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()


def _answer(call: Any, inp: Any, max_bytes: int, output: Output) -> dict[str, Any]:
    output.begin()
    try:
        value = call(inp)
    except BaseException as exc:  # noqa: BLE001 - what the guard raised is the harness's to judge
        _only_the_worker()
        return {"kind": "raised", **_raised(exc), "output": output.end()}
    _only_the_worker()
    return {**_returned(value, max_bytes), "output": output.end()}


def _only_the_worker() -> None:
    """A copy the guard forked that comes back here ends at once (before it touches the output
    lock, which another thread may have held when it was copied)."""
    if os.getpid() != _PID:
        os._exit(0)


def _returned(value: Any, max_bytes: int) -> dict[str, Any]:
    """The return in the documented decision shapes (types.py), as JSON data: a str, or the
    verdict's fields as a dict (a `Verdict`, any dataclass, a Mapping). Anything else is refused
    here, naming its type: nothing of it crosses to the harness."""
    import dataclasses
    from collections.abc import Mapping

    kind = type(value).__name__[:100]
    try:
        if isinstance(value, str):
            data: Any = str(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            data = dataclasses.asdict(value)
        elif isinstance(value, Mapping):
            data = dict(value)
        else:
            if inspect.iscoroutine(value):
                value.close()
            return {"kind": "refused", "returned": kind, "why": "not a decision shape"}
        text = json.dumps({"value": data}, allow_nan=False)
    except BaseException as exc:  # noqa: BLE001 - a mapping whose iteration raises, a value that is not JSON
        return {"kind": "refused", "returned": kind, "why": describe_exception(exc, 200)}
    if len(text) > max_bytes:
        return {"kind": "too_large", "returned": kind, "bytes": len(text)}
    return {"kind": "ok", "returned": kind, "value": data}


def _raised(exc: BaseException) -> dict[str, Any]:
    from guardeval.backends import errors

    if isinstance(exc, errors.AttemptError):
        cls = next((c for c in ATTEMPT_CLASSES if isinstance(exc, getattr(errors, c))), "TransientError")
        retry = exc.retry_after if type(exc.retry_after) in (int, float) else None
        return {"how": "attempt", "error": [cls, str(exc.error_class)[:100], _text(exc)[:2 * MAX_ERROR_CHARS], retry]}
    return {"how": "exception" if isinstance(exc, Exception) else "exit", "said": describe_exception(exc)}


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        return "<unprintable>"


def _send(out: IO[bytes], message: dict[str, Any]) -> None:
    if os.getpid() != _PID:   # a copy the guard forked came back here: it never answers
        os._exit(0)
    data = json.dumps({**message, "pid": _PID}).encode()
    try:
        out.write(len(data).to_bytes(HEADER_BYTES, "big") + data)
        out.flush()
    except (BrokenPipeError, ValueError, OSError):   # the harness is gone
        _end()


def _receive(wire_in: IO[bytes]) -> bytes | None:
    if os.getpid() != _PID:
        os._exit(0)
    try:
        head = wire_in.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES:
            return None
        n = int.from_bytes(head, "big")
        if n > MAX_REQUEST_BYTES:
            return None
        data = wire_in.read(n)
    except (OSError, ValueError):
        return None
    return data if len(data) == n else None

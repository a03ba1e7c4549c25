"""A python guard's worker process (`isolation = "process"`, issue 40): the side that runs the
guard. The harness's side is `processes.py`.

Started as `python -c BOOTSTRAP` in a session of its own (a terminal's Ctrl-C goes to the
harness, which ends its workers; killing the session's group ends whatever the guard started).
Its stdin and stdout carry the wire: frames of a 4-byte big-endian length and a pickle.

* The harness sends `{"path": sys.path, "callable": NAME, "module": M, "max_bytes": N, "parent":
  PID}` (`M`: the module its provenance names); the worker takes the harness's import path, imports the
  callable once (`resolve.load`) and answers `("ready", SHA-256 of M's source as imported here)`
  or `("failed", why)`.
* Then, per call, a `GuardInput`, answered by one frame, each ending with the call's output
  (`Capture.record`, unredacted: the harness redacts):
  `("ok", type name, pickled return, output)`; `("unsendable", type name, why, output)` when the
  return cannot be pickled; `("too_large", type name, bytes, output)` when its pickle is over
  `max_bytes`; `("raised", kind, detail, output)` when the function raised: kind `attempt` (one
  of guardeval's own errors: `(class, error_class, message, retry_after)`), `exception` (an
  `Exception`: its description) or `exit` (`SystemExit`, `KeyboardInterrupt`: its description).
* End of stdin ends the worker (the harness closed it, or is gone).

Once the callable is imported, fd 0 is /dev/null and fd 1 is the harness's stderr, so nothing
the guard writes to stdout, even from C code or a child process, can enter the wire; what it
prints during a call is kept with the call, as in the harness (`output.py`). An `async def`
guard runs to its end on an event loop of the worker's own.
"""

from __future__ import annotations

import inspect
import os
import pickle
import sys
from typing import IO, Any

from guardeval.backends.python_guard.describe import MAX_ERROR_CHARS, describe_exception
from guardeval.backends.python_guard.output import Capture, Redirect

HEADER_BYTES = 4
# The child's first lines: only the standard library until the harness's import path is in place.
BOOTSTRAP = ("import os, pickle, sys\n"
             "wire = os.fdopen(os.dup(0), 'rb')\n"
             "start = pickle.loads(wire.read(int.from_bytes(wire.read(4), 'big')))\n"
             "sys.path[:] = start['path']\n"
             "from guardeval.backends.python_guard.worker import main\n"
             "main(start, wire)\n")
# The error classes a guard may raise with a meaning (guardeval.backends.errors), most specific first.
ATTEMPT_CLASSES = ("CallFailed", "FatalError", "GuardError", "TransientError")


def main(start: dict[str, Any], wire_in: IO[bytes]) -> None:
    _end_with_parent(int(start["parent"]))
    wire_out = os.fdopen(os.dup(1), "wb")
    try:
        fn, source_sha256 = _load(str(start["callable"]), str(start["module"]))
    except BaseException as exc:  # noqa: BLE001 - a module that fails to import, however it fails
        _send(wire_out, ("failed", getattr(exc, "message", None) or describe_exception(exc)))
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    Redirect.install()
    _send(wire_out, ("ready", source_sha256))
    call = _caller(fn)
    max_bytes = int(start["max_bytes"])
    while (frame := _receive(wire_in)) is not None:
        _send(wire_out, _answer(call, pickle.loads(frame), max_bytes))


def _end_with_parent(parent: int) -> None:
    """On Linux, the kernel kills this worker when the harness dies, even a SIGKILLed harness and
    a worker stuck in C code (PR_SET_PDEATHSIG). Elsewhere an idle worker ends when its stdin
    closes."""
    if sys.platform != "linux":
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:   # the harness died before the line above
        os._exit(1)


def _load(name: str, module: str) -> tuple[Any, str | None]:
    """The callable, and the SHA-256 of the source of `module` (the harness's provenance names
    the module that defines it) as this worker imported it."""
    from guardeval.backends.python_guard import resolve

    fn = resolve.load(name)
    return fn, resolve.source_sha256(module)


def _caller(fn: Any) -> Any:
    """`fn` as a plain function: an `async def` one runs on this worker's own loop."""
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
        return fn
    import asyncio  # only then: it is a tenth of a worker's start-up

    loop = asyncio.new_event_loop()
    return lambda inp: loop.run_until_complete(fn(inp))


def _answer(call: Any, inp: Any, max_bytes: int) -> tuple[Any, ...]:
    capture = Capture()
    token = capture.enter()
    try:
        value = call(inp)
    except BaseException as exc:  # noqa: BLE001 - what the guard raised is the harness's to judge
        return ("raised", *_raised(exc), capture.record())
    finally:
        Capture.leave(token)
    kind = type(value).__name__[:100]
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - a lambda, a lock, a generator, a __reduce__ that raises
        return ("unsendable", kind, describe_exception(exc, 200), capture.record())
    if len(data) > max_bytes:
        return ("too_large", kind, len(data), capture.record())
    return ("ok", kind, data, capture.record())


def _raised(exc: BaseException) -> tuple[str, Any]:
    from guardeval.backends import errors

    if isinstance(exc, errors.AttemptError):
        cls = next((c for c in ATTEMPT_CLASSES if isinstance(exc, getattr(errors, c))), "TransientError")
        retry = exc.retry_after if type(exc.retry_after) in (int, float) else None
        return "attempt", (cls, str(exc.error_class)[:100], _text(exc)[:2 * MAX_ERROR_CHARS], retry)
    return ("exception" if isinstance(exc, Exception) else "exit"), describe_exception(exc)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        return "<unprintable>"


def _send(out: IO[bytes], message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        out.write(len(data).to_bytes(HEADER_BYTES, "big") + data)
        out.flush()
    except BrokenPipeError:   # the harness is gone
        sys.exit(0)


def _receive(wire_in: IO[bytes]) -> bytes | None:
    head = wire_in.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        return None
    n = int.from_bytes(head, "big")
    data = wire_in.read(n)
    return data if len(data) == n else None

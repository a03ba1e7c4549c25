"""Exceptions that map to the exit codes of docs/design.md §11, and the tree of every exception
class the package defines (tests/test_errors_tree.py holds both to the code).

What reaches a caller of `guardeval.api` or the command line derives from `GuardevalError`; the
CLI prints its message and returns its `exit_code`:

    GuardevalError (1)
    ├── InputError (2): bad input or usage, naming file, line and field
    │   ├── UnpackedTooLarge (guardeval.inspect_zip): a .eval zip past its unpacked cap
    │   └── NotWritable (guardeval.run.folder.folder): outputs for a folder this process cannot write
    ├── CheckFailed (1): verify, unpublishable, partial run
    │   ├── Incomplete (guardeval.estimators.core): calls without a decision, no --allow-partial
    │   └── LineTooLong (guardeval.run.folder.folder_io): a log line past the run's line cap
    ├── RunStopped (1): a fatal provider error or the budget; the run stays resumable
    │   └── WriteFailed (1): a write the disk would not take
    └── RunLocked (1): another process holds the run's lock

Internal: raised and caught inside the package, never out of `guardeval.api` or the CLI (each
line says what catches it and what it becomes). Listed in `INTERNAL`:

    Exception
    ├── AttemptError (guardeval.backends.errors): one attempt without a usable reply, raised by
    │   │   a back-end's send; the dispatcher records the attempt and decides the call
    │   ├── TransientError: retried with back-off, then the call's failure status
    │   ├── FatalError: stops the run (RunStopped); a preflight's failed check
    │   ├── GuardError: the guard's own failure, tried once more, then guard_error
    │   └── CallFailed: this call fails, the others go on
    ├── BodyTooLarge, BodyUnreadable (guardeval.backends.body): a response body past its cap
    │       or not decodable; chat_http records it as an AttemptError
    ├── FetchError (guardeval.backends.http_get): an endpoint not reached; a preflight's
    │       failed check, or generation stats left out
    ├── WorkerLost (guardeval.backends.python_guard.processes): a python guard's worker process
    │   │   died during a call; the back-end raises GuardError
    │   └── ProtocolError: a worker broke the wire protocol; the same
    ├── WorkerStartFailed, SourceChanged (guardeval.backends.python_guard.processes): a worker
    │       could not start, or imported changed code; the back-end raises FatalError
    ├── BadSample (guardeval.cohorts.builders.inspect_log): an Inspect sample the builder cannot
    │       use; InputError, or skipped and counted with --skip-bad-samples
    ├── _Abandoned (guardeval.backends.mlx_backend): a generation whose caller was cancelled
    └── _CircuitOpen, _Ended (guardeval.run.dispatch.dispatch): the dispatcher's own control flow
    BaseException (so that a guard's or a library's `except Exception` cannot swallow it)
    ├── Terminated (guardeval.cli.app): SIGTERM outside dispatch; the CLI exits 1
    └── LoopBlocked (guardeval.backends.python_guard.loop_watch): an async guard blocked the
            event loop; the back-end raises FatalError
"""

from __future__ import annotations

import errno


class GuardevalError(Exception):
    """Base class; `exit_code` is what the CLI returns."""

    exit_code = 1


class InputError(GuardevalError):
    """Bad input or usage: a file, line or field that fails validation (exit 2)."""

    exit_code = 2

    def __init__(self, message: str, *, path: object = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        self.path, self.line, self.field = path, line, field
        self.message = message      # without the place: for a caller that names the place itself
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class CheckFailed(GuardevalError):
    """A check failed: verify, unpublishable, partial run (exit 1)."""

    exit_code = 1


class RunStopped(GuardevalError):
    """A run stopped by a fatal provider error or the budget; it stays resumable (exit 1)."""

    exit_code = 1


class RunLocked(GuardevalError):
    """Another process holds the run's lock."""

    exit_code = 1


_DISK_FULL = {errno.ENOSPC: "no space left on device: the disk is full",
              errno.EDQUOT: "disk quota exceeded: the disk is full for this user",
              errno.EFBIG: "file too large: a file-size limit (ulimit -f) was reached"}


class WriteFailed(RunStopped):
    """A write the disk would not take (full, over quota, a file-size limit, an I/O error).
    Nothing half-written is kept; the run stays resumable (exit 1)."""

    def __init__(self, path: object, exc: OSError, hint: str) -> None:
        self.path, self.errno = path, exc.errno
        reason = _DISK_FULL.get(exc.errno or 0) or f"cannot write ({exc.strerror or exc})"
        super().__init__(f"{path}: {reason}. {hint}".rstrip())

    @property
    def disk_full(self) -> bool:
        return self.errno in _DISK_FULL


def os_error_text(exc: OSError) -> str:
    """`file: reason` of an OSError, saying so when the disk is full."""
    reason = _DISK_FULL.get(exc.errno or 0) or str(exc.strerror or exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


# The internal exception classes of the tree above, by module and name.
INTERNAL: frozenset[str] = frozenset({
    "guardeval.backends.errors.AttemptError",
    "guardeval.backends.errors.TransientError",
    "guardeval.backends.errors.FatalError",
    "guardeval.backends.errors.GuardError",
    "guardeval.backends.errors.CallFailed",
    "guardeval.backends.body.BodyTooLarge",
    "guardeval.backends.body.BodyUnreadable",
    "guardeval.backends.http_get.FetchError",
    "guardeval.backends.python_guard.processes.WorkerLost",
    "guardeval.backends.python_guard.processes.ProtocolError",
    "guardeval.backends.python_guard.processes.WorkerStartFailed",
    "guardeval.backends.python_guard.processes.SourceChanged",
    "guardeval.cohorts.builders.inspect_log.BadSample",
    "guardeval.backends.mlx_backend._Abandoned",
    "guardeval.run.dispatch.dispatch._CircuitOpen",
    "guardeval.run.dispatch.dispatch._Ended",
    "guardeval.cli.app.Terminated",
    "guardeval.backends.python_guard.loop_watch.LoopBlocked",
})

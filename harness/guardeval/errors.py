"""Exceptions that map to the exit codes of docs/design.md §11."""

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

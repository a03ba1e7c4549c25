"""Exceptions that map to the exit codes of docs/design.md §11."""

from __future__ import annotations


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

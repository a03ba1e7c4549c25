"""What a python guard prints, kept away from the command's own output (issue 27).

A guard that prints (a debug line, a library's progress bar) would otherwise write into
`launch --json`'s stdout and over the progress line on stderr. While a python guard runs,
`sys.stdout` and `sys.stderr` are stand-ins that pass writes through, except those made
inside a guard call (an `async def` call's task, a plain function's thread: a context
variable says which call): those are kept with the call, the first `MAX_KEPT_CHARS` of each
stream and the count of the rest, and the dispatcher records them in the attempt's raw line
(`guard_output`). Output written to the file descriptors themselves (C code, a subprocess)
is not seen here (with `--json`, the CLI points fd 1 at stderr: `cli/app.py`); importing the
guard's module runs with stdout sent to stderr (`resolve.load`). A worker process
(`isolation = "process"`) keeps everything a call writes to its fds 1 and 2, the descriptors
themselves, bounded the same way (`worker.Output`), and sends it back with its answer
(`received_record`).
"""

from __future__ import annotations

import sys
from contextvars import ContextVar, Token
from typing import Any

MAX_KEPT_CHARS = 2048     # of each stream, per attempt
STREAMS = ("stdout", "stderr")
_CURRENT: ContextVar[Capture | None] = ContextVar("guardeval_guard_output", default=None)


class Capture:
    """One attempt's output, bounded."""

    def __init__(self, guard: str | None = None) -> None:
        self.guard = guard      # the callable's name: what `last_words` says ended the process
        self.kept: dict[str, list[str]] = {s: [] for s in STREAMS}
        self.room = dict.fromkeys(STREAMS, MAX_KEPT_CHARS)
        self.chars = dict.fromkeys(STREAMS, 0)

    def add(self, stream: str, text: str) -> None:
        self.chars[stream] += len(text)
        if self.room[stream] > 0:
            piece = text[:self.room[stream]]
            self.kept[stream].append(piece)
            self.room[stream] -= len(piece)

    def record(self, redact: Any = None) -> dict[str, Any] | None:
        """The raw line's `guard_output` (None: nothing was written): per stream the text kept
        and how many characters were written in all."""
        if not any(self.chars.values()):
            return None
        out: dict[str, Any] = {}
        for s in STREAMS:
            if self.chars[s]:
                text = "".join(self.kept[s])
                out[s] = redact(text) if redact is not None else text
                out[f"{s}_chars"] = self.chars[s]
        return out

    def enter(self) -> Token[Capture | None]:
        """Make this the capture of the running task or thread (`leave` undoes it)."""
        return _CURRENT.set(self)

    @staticmethod
    def leave(token: Token[Capture | None]) -> None:
        _CURRENT.reset(token)


def current() -> Capture | None:
    """The capture of the guard call running in this thread or task (None: not in a call)."""
    return _CURRENT.get()


class _Stream:
    """Stands in for sys.stdout or sys.stderr: a write inside a guard call is kept with it,
    any other goes to the real stream."""

    def __init__(self, name: str, real: Any) -> None:
        self._name, self._real = name, real

    def write(self, text: str) -> int:
        capture = _CURRENT.get()
        if capture is None:
            return int(self._real.write(text))
        capture.add(self._name, str(text))
        return len(text)

    def flush(self) -> None:
        if _CURRENT.get() is None:
            self._real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Redirect:
    """Installed while python guards are open (counted: nested guards share one)."""

    _users = 0
    _saved: tuple[Any, Any] | None = None

    @classmethod
    def install(cls) -> None:
        if cls._users == 0:
            cls._saved = (sys.stdout, sys.stderr)
            sys.stdout, sys.stderr = _Stream("stdout", sys.stdout), _Stream("stderr", sys.stderr)
        cls._users += 1

    @classmethod
    def remove(cls) -> None:
        cls._users = max(0, cls._users - 1)
        if cls._users == 0 and cls._saved is not None:
            # Put back only what is still ours: someone who replaced them since keeps theirs.
            if isinstance(sys.stdout, _Stream):
                sys.stdout = cls._saved[0]
            if isinstance(sys.stderr, _Stream):
                sys.stderr = cls._saved[1]
            cls._saved = None


def received_record(record: Any, redact: Any) -> dict[str, Any] | None:
    """A worker process's `Capture.record()` (`isolation = "process"`), redacted here; anything
    but that shape is dropped."""
    if not isinstance(record, dict):
        return None
    out: dict[str, Any] = {}
    for s in STREAMS:
        text, chars = record.get(s), record.get(f"{s}_chars")
        if isinstance(text, str) and type(chars) is int and chars > 0:
            out[s] = redact(text[:MAX_KEPT_CHARS])
            out[f"{s}_chars"] = chars
    return out or None

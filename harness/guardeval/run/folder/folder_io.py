"""The pieces `RunFolder` (harness/guardeval/run/folder/folder.py) is built from: a reader by offset over one
shared descriptor, the folder lock, and the refusal of a line past the run's cap."""

from __future__ import annotations

import fcntl
import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guardeval.errors import CheckFailed, RunLocked

_PREADV = getattr(os, "preadv", None)   # not on every platform Python runs on


class LineTooLong(CheckFailed):
    """A log line longer than the run's `line_cap`: refused before it is read whole (exit 1)."""

    def __init__(self, path: Path, lineno: int, cap: int) -> None:
        self.path, self.lineno, self.cap = path, lineno, cap
        super().__init__(f"{path}: line {lineno}: longer than {cap} bytes, far past any line guardeval writes "
                         f"(the file is damaged; `guardeval verify {path.parent}` lists every problem)")


class RunLock:
    """Exclusive, non-blocking `flock` on a run folder (`RunFolder.lock`): the lock is the folder
    itself, so deleting or replacing `.lock` cannot undo it. Each session opens the folder anew
    (`reopen`) and locks that descriptor: `flock` belongs to an open file description, so two
    sessions of one process (two threads on one `Run`) exclude each other as two processes do."""

    def __init__(self, reopen: Callable[[], int], path: Path, write_pid: Callable[[], None]) -> None:
        self._reopen, self.path, self._write_pid = reopen, path, write_pid
        self._fd = -1

    def __enter__(self) -> RunLock:
        if self._fd >= 0:
            raise RunLocked(f"{self.path}: this session already holds the run's lock")
        fd = self._reopen()
        # A `status` probe (`held_by_another`) holds the lock for microseconds: try a few times
        # over ~50 ms before concluding that another writer has it.
        try:
            for attempt in range(6):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 5:
                        raise RunLocked(f"{self.path}: another guardeval process or thread is writing this run") from None
                    time.sleep(0.01)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            self._write_pid()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)   # closing the last descriptor of the description releases its lock
        self._fd = -1


class PRead(io.RawIOBase):
    """A reader of a descriptor by offset (`pread`): its own position, the descriptor shared."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd, self._pos = fd, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if _PREADV is not None:
            n = _PREADV(self._fd, [b], self._pos)      # straight into the buffer
        else:
            data = os.pread(self._fd, len(b), self._pos)
            n = len(data)
            b[:n] = data
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: os.fstat(self._fd).st_size}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def fileno(self) -> int:
        return self._fd

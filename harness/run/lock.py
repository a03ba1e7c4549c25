"""The run lock: one writer per run folder at a time; the kernel releases it when the holder
dies, even by SIGKILL."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from harness.errors import RunLocked, WriteFailed
from harness.run.layout import LOCK


class RunLock:
    """Exclusive, non-blocking `flock` on `<run>/.lock`."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WriteFailed(self.path, exc, "The run was not changed.") from None
        # A `status` probe (`held_by_another`) holds the lock for microseconds: try a few times
        # over ~50 ms before concluding that another writer has it.
        for attempt in range(6):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 5:
                    os.close(fd)
                    raise RunLocked(f"{self.path.parent}: another guardeval process is writing this run") from None
                time.sleep(0.01)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the holder's pid is for people reading the file; the lock is the flock
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def held_by_another(run_dir: Path) -> bool:
        """Whether a process holds the run's lock now (is running it). Creates nothing; the lock
        dies with its process, so a killed run reads as not running."""
        try:
            fd = os.open(run_dir / LOCK, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return False   # never run, or unreadable: no writer can be known to hold it
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)


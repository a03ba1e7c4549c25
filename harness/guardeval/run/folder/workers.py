"""Forked workers for the scans of large runs (`status`, `resume`, `verify`).

A scan runs in a forked child when that pays: the input is large (the thresholds below, one
set for every scan) and a second CPU is there. The child inherits the parent's memory (no input
is pickled) and sends back what its function returns. A child that fails, or meets a damaged
line, sends nothing: the caller then does the work itself, so that an error names the right
line and the answer is the same either way.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardeval.run.folder.folder import RunFolder

LOG_MIN_BYTES = 32 << 20        # a raw log below this is read inline: a worker costs more than it saves
RENDER_MIN_INSTANCES = 1000     # a cohort below this is re-rendered inline


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one (Linux), else
    the machine's count (macOS and Windows have no `os.sched_getaffinity`)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def log_pays(size: int) -> bool:
    """Whether a raw log of `size` bytes is read by forked workers."""
    return size >= LOG_MIN_BYTES and _can_fork()


def render_pays(n_instances: int) -> bool:
    """Whether a cohort of `n_instances` is re-rendered by a forked worker."""
    return n_instances >= RENDER_MIN_INSTANCES and _can_fork()


def _can_fork() -> bool:
    # A second CPU to run on, and fork (Linux and macOS have it; Windows does not).
    return usable_cpus() > 1 and "fork" in multiprocessing.get_all_start_methods()


class Worker:
    """`fn(*args)` in a forked child, started now. `result()` is its return value, or None
    when the child failed (so `fn` must not return None)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc: Any = ctx.Process(target=_child, args=(fn, args, child), daemon=True)
        self._proc.start()
        child.close()

    def result(self) -> Any:
        if self._proc is None:
            return None
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return None
        finally:
            self._conn.close()
            self._proc.join()
            self._proc = None

    def stop(self) -> None:
        """End a child whose result is no longer wanted (the caller's own pass raised)."""
        if self._proc is None:
            return
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join()
        self._proc = None
        self._conn.close()


def _child(fn: Callable[..., Any], args: tuple[Any, ...], conn: Any) -> None:
    try:
        conn.send(fn(*args))
    except Exception:  # noqa: BLE001 - the parent does the work itself and raises the error there
        pass
    finally:
        conn.close()


def halves(folder: RunFolder, name: str, fn: Callable[..., Any], *args: Any) -> list[Worker]:
    """`fn(folder, start, end, *args)` over each half of a large log `name` of the run folder
    (split at a line start), in two workers (they inherit the folder's open descriptors); []
    when the log is small or there is one CPU."""
    size = folder.size(name)
    if not log_pays(size):
        return []
    middle = folder.line_boundary(name, size // 2)
    return [Worker(fn, folder, start, end, *args) for start, end in ((0, middle), (middle, size))]

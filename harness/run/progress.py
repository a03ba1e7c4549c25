"""Live progress on stderr: done/total, rate, ETA, the adaptive wire limit, retries, failures, spend.

On a terminal it is a rich progress bar; otherwise (CI, pipes) a plain line every few
seconds, so long runs still show signs of life in logs.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RunProgress:
    def __init__(self, total: int, already: int = 0, *, stream: TextIO | None = None,
                 enabled: bool = True, plain_every_s: float = 5.0) -> None:
        self.total, self.done = total, already
        self.retries = self.failures = self.quarantined = 0
        self.spend = 0.0
        self.wire = ""          # the adaptive limit now / the most, e.g. `c=37/64` (set by the dispatcher)
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._tty = enabled and self._stream.isatty()
        self._plain_every = plain_every_s
        self._last_plain = 0.0
        self._t0 = time.monotonic()
        self._start_done = already
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        if self._tty:
            self._progress = Progress(
                TextColumn("[bold]calls"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                TextColumn("{task.fields[extra]}"),
                console=Console(file=self._stream), refresh_per_second=4, transient=False)
            self._progress.__enter__()
            self._task = self._progress.add_task("calls", total=self.total, completed=self.done,
                                                 rate="", extra="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self.refresh()
            self._progress.__exit__(None, None, None)
        elif self._enabled:
            self._plain(force=True)

    def rate(self) -> float:
        elapsed = time.monotonic() - self._t0
        return (self.done - self._start_done) / elapsed if elapsed > 0 else 0.0

    def summary(self) -> str:
        r = self.rate()
        remaining = self.total - self.done
        eta = f"{remaining / r:.0f}s" if r > 0 else "?"
        wire = f", {self.wire}" if self.wire else ""
        return (f"{self.done}/{self.total} calls, {r:.1f}/s{wire}, ETA {eta}, retries {self.retries}, "
                f"failures {self.failures}, quarantined {self.quarantined}, spend ${self.spend:.4f}")

    def refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.done,
                                  rate=f"{self.rate():.1f}/s" + (f" {self.wire}" if self.wire else ""),
                                  extra=f"retries {self.retries} · failures {self.failures} · "
                                        f"quarantined {self.quarantined} · ${self.spend:.4f}")
        elif self._enabled:
            self._plain()

    def _plain(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_plain >= self._plain_every:
            self._last_plain = now
            print(f"progress: {self.summary()}", file=self._stream, flush=True)

    # Counters; the dispatcher calls these.
    def call_done(self, *, failed: bool, quarantined: bool) -> None:
        self.done += 1
        self.failures += int(failed)
        self.quarantined += int(quarantined)
        self.refresh()

    def retry(self) -> None:
        self.retries += 1

    def add_spend(self, cost: float) -> None:
        self.spend += cost

    def note(self, message: str) -> None:
        """A one-off message on the progress stream (above the bar on a terminal), shown even
        with the display off."""
        if self._progress is not None:
            self._progress.console.print(f"guardeval: note: {message}", markup=False, highlight=False)
        else:
            print(f"guardeval: note: {message}", file=self._stream, flush=True)

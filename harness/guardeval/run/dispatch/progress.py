"""Live progress on stderr: done/total, rate, the adaptive wire limit, ETA, retries, failures,
quarantined, spend.

On a terminal, one line redrawn in place that fits the terminal's width (80 columns keep the
count, the rate, the ETA and the spend; the bar gets what is left); otherwise (CI, pipes) a
plain line every few seconds, at most 80 columns, so long runs still show signs of life in logs.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

PLAIN_WIDTH = 80


class RunProgress:
    def __init__(self, total: int, already: int = 0, *, stream: TextIO | None = None,
                 enabled: bool = True, plain_every_s: float = 5.0, simulated_spend: bool = False,
                 retrying: int = 0) -> None:
        self.total, self.done = total, already
        # `resume --retry-failed`: calls decided before, tried again; counted apart, so the calls'
        # count never passes the run's size.
        self.retrying, self.retried = retrying, 0
        self.retries = self.failures = self.quarantined = 0
        self.spend = 0.0
        self._simulated = simulated_spend
        self.wire = ""          # the adaptive limit now / the most, e.g. `c=37/64` (set by the dispatcher)
        self.goal: int | None = None   # a pilot's stop (already + --max-calls): its ETA is to there
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._tty = enabled and self._stream.isatty()
        self._plain_every = plain_every_s
        self._last_plain = 0.0
        self._t0 = time.monotonic()
        self._start_done = already
        self._live: Any = None

    def __enter__(self) -> RunProgress:
        if self._tty:
            from rich.console import Console  # only a terminal needs rich
            from rich.live import Live
            from rich.text import Text

            console = Console(file=self._stream)
            self._live = Live(get_renderable=lambda: Text(self.line(console.width), no_wrap=True, overflow="crop"),
                              console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(None, None, None)
        elif self._enabled:
            self._plain(force=True)

    def rate(self) -> float:
        elapsed = time.monotonic() - self._t0
        return (self.done - self._start_done + self.retried) / elapsed if elapsed > 0 else 0.0

    def line(self, width: int, *, bar: bool = True) -> str:
        """The progress line in at most `width` columns. Most important first: the count, the rate,
        the ETA and the spend; then the other counters, shortened if need be; then a bar."""
        r = self.rate()
        until = self.total if self.goal is None else min(self.goal, self.total)
        left = max(0, until - self.done) + max(0, self.retrying - self.retried)
        eta = _clock(left / r) if r > 0 else "?"
        wire = f" {self.wire}" if self.wire else ""
        pilot = f" (pilot to {until})" if until < self.total else ""
        again = f" + {self.retried}/{self.retrying} retried" if self.retrying else ""
        head = f"{self.done}/{self.total} calls{again}{pilot} {r:.1f}/s{wire} ETA {eta}"
        spend = f"${self.spend:.4f}" + (" simulated" if self._simulated else "")
        for tail in (f"{self.retries} retries · {self.failures} failed · {self.quarantined} quarantined · {spend}",
                     f"retr {self.retries} fail {self.failures} quar {self.quarantined} {spend}",
                     spend, ""):
            text = f"{head} · {tail}" if tail else head
            if len(text) <= width:
                break
        room = width - len(text) - 1
        if bar and room >= 12:   # a bar only where it fits beside everything else
            n = min(30, room)
            filled = round(n * self.done / self.total) if self.total else n
            text = "━" * filled + "─" * (n - filled) + " " + text
        return text[:width]

    def summary(self) -> str:
        return self.line(PLAIN_WIDTH - len("progress: "), bar=False)

    def refresh(self) -> None:
        if self._live is not None:
            return   # redrawn by rich, four times a second
        if self._enabled:
            self._plain()

    def _plain(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_plain >= self._plain_every:
            self._last_plain = now
            print(f"progress: {self.summary()}", file=self._stream, flush=True)

    # Counters; the dispatcher calls these.
    def call_done(self, *, failed: bool, quarantined: bool, retried: bool = False) -> None:
        if retried:
            self.retried += 1
        else:
            self.done += 1
        self.failures += int(failed)
        self.quarantined += int(quarantined)
        self.refresh()

    def retry(self) -> None:
        self.retries += 1

    def add_spend(self, cost: float) -> None:
        self.spend += cost

    def note(self, message: str) -> None:
        """A one-off message on the progress stream (above the live line on a terminal), shown
        even with the display off."""
        if self._live is not None:
            self._live.console.print(f"guardeval: note: {message}", markup=False, highlight=False)
        else:
            print(f"guardeval: note: {message}", file=self._stream, flush=True)


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"

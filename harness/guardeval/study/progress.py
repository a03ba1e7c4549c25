"""One progress display for a study's runs, a line per guard (stderr).

Each run's dispatcher keeps its counters in a `GuardLine` (a `RunProgress` that draws nothing
itself); the `StudyDisplay` draws them all: on a terminal, one block redrawn in place (a line per
guard, fitted to the width, and a line for the study); otherwise every few seconds a plain line
per guard of at most 80 columns. Notes from a run (`--max-cost` cannot be enforced, …) are
printed once, prefixed with its label.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from guardeval.run.dispatch.progress import PLAIN_WIDTH, RunProgress
from guardeval.terminal import safe


class StudyDisplay:
    def __init__(self, labels: Sequence[str], *, enabled: bool = True, stream: TextIO | None = None,
                 plain_every_s: float = 5.0) -> None:
        self.labels = list(labels)
        self.lines: dict[str, RunProgress] = {}
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._tty = enabled and self._stream.isatty()
        self._plain_every = plain_every_s
        self._last_plain = 0.0
        self._live: Any = None
        self._width = max((len(x) for x in self.labels), default=0)

    def line_type(self, label: str) -> Callable[..., RunProgress]:
        """The progress class of run `label`'s dispatcher (`DispatchOptions.progress_type`)."""
        display = self

        class GuardLine(RunProgress):
            def __init__(self, total: int, already: int = 0, *, enabled: bool = True,
                         simulated_spend: bool = False, retrying: int = 0, **_: Any) -> None:
                super().__init__(total, already, enabled=False, simulated_spend=simulated_spend, retrying=retrying)
                display.lines[label] = self

            def __enter__(self) -> GuardLine:
                return self

            def __exit__(self, *exc: object) -> None:
                display.refresh()

            def refresh(self) -> None:
                display.refresh()

            def note(self, message: str) -> None:
                display.note(label, message)

        return GuardLine

    def __enter__(self) -> StudyDisplay:
        if self._tty:
            from rich.console import Console, Group  # only a terminal needs rich
            from rich.live import Live
            from rich.text import Text

            console = Console(file=self._stream)

            def render() -> Any:
                width = console.width
                return Group(*(Text(x, no_wrap=True, overflow="crop") for x in self.text(width)))

            self._live = Live(get_renderable=render, console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(None, None, None)
            self._live = None
        elif self._enabled:
            self._plain(force=True)

    def text(self, width: int, *, bar: bool = True) -> list[str]:
        """A line per guard (label, then its run's progress line), then the study's totals."""
        out = []
        done = total = 0
        spend = 0.0
        for label in self.labels:
            p = self.lines.get(label)
            head = f"{label:<{self._width}} "
            if p is None:
                out.append(safe(head + "waiting")[:width])
                continue
            done, total, spend = done + p.done, total + p.total, spend + p.spend
            out.append(safe(head) + p.line(max(1, width - len(head)), bar=bar))
        out.append(f"study: {done}/{total} calls · ${spend:.4f}"[:width])
        return out

    def refresh(self) -> None:
        if self._live is None and self._enabled:
            self._plain()

    def _plain(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_plain >= self._plain_every:
            self._last_plain = now
            for line in self.text(PLAIN_WIDTH - len("progress: "), bar=False):
                print(f"progress: {line}", file=self._stream, flush=True)

    def note(self, label: str, message: str) -> None:
        text = safe(f"guardeval: {label}: note: {message}")
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self._stream, flush=True)

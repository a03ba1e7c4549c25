"""schedule -> run folder -> dispatch -> status. `guardeval.run.Run` is the one way to open a run."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Loaded on first use: importing any module of the layer must not load the dispatcher.
    if name == "Run":
        from guardeval.run.run import Run

        return Run
    raise AttributeError(name)

"""Re-rendering a run's requests and re-deriving its decisions, for `guardeval verify`: the
renders (in a worker when they pay) and the run's parser with its pinned providers."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

from guardeval.canon import canonical_bytes
from guardeval.cohorts.model import Cohort
from guardeval.run.folder.workers import Worker, render_pays


def render_cells(cohort: Cohort, render: Callable[[Any], dict[str, Any]]) -> tuple[bytes, bytearray]:
    """SHA-256 of the request body of every cohort cell (32 bytes each) and a failure flag."""
    digests = bytearray(32 * cohort.n_instances)
    failed = bytearray(cohort.n_instances)
    for inst in cohort.iter_instances():
        cell = cohort.cell(inst["base_id"], inst["condition"])
        try:
            digests[32 * cell:32 * cell + 32] = hashlib.sha256(canonical_bytes(render(inst))).digest()
        except (KeyError, TypeError):
            failed[cell] = 1
    return bytes(digests), failed


class RenderJob:
    """Renders every instance once, in a forked worker when the cohort is large and a second
    CPU is there (the main process meanwhile streams the logs), else inline when asked for."""

    def __init__(self, cohort: Cohort, render: Callable[[Any], dict[str, Any]]) -> None:
        self.cohort, self.render = cohort, render
        self._worker = Worker(render_cells, cohort, render) if render_pays(cohort.n_instances) else None

    def result(self) -> tuple[bytes, bytearray]:
        done = self._worker.result() if self._worker is not None else None
        self._worker = None
        # None: no worker, or it died: render here instead (the same result, or the same error).
        return done if done is not None else render_cells(self.cohort, self.render)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None


def memo_parser(parser: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """Parsers are pure functions of (content, finish_reason), and a run's answers repeat (a
    guard says the same few verdicts): parse each distinct answer once."""
    cached = functools.lru_cache(maxsize=65536)(parser)

    def parse(content: Any, finish_reason: Any) -> Any:
        if (content is None or type(content) is str) and (finish_reason is None or type(finish_reason) is str):
            return cached(content, finish_reason)
        return parser(content, finish_reason)
    return parse


# (the guard's back-end, the providers its config allows): what decide's own checks read.
Pin = tuple[str | None, tuple[str, ...]]


def parser_and_pin(manifest: dict[str, Any]) -> tuple[Callable[[Any, Any], Any] | None, Pin, str]:
    """(parser, back-end and allowed providers, why not) from the manifest; the parser is None
    when the manifest names none this version has, or its guard config is unusable."""
    try:
        from guardeval.backends.config import GuardConfig
        from guardeval.backends.parsers import get_parser

        cfg = GuardConfig(**manifest["guard"])
        return memo_parser(get_parser(manifest["prompt"]["parser"])), (cfg.backend, cfg.allowed_providers), ""
    except Exception as exc:  # noqa: BLE001 - any failure here means: no re-derivation
        return None, (None, ()), f"no parser for this run's manifest ({type(exc).__name__}: {exc})"

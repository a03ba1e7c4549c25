"""A study's runs dispatched together: one process, one event loop, each run with its own
dispatcher (its concurrency, rate limits, retries, its own stop rules), one budget for the study
(`SharedBudget`), one progress display (`StudyDisplay`), one watcher for SIGINT and SIGTERM.

Each run is opened as `guardeval resume` opens it (`guardeval.run.runner.session`: its lock, the
checks, recovery of torn lines and lost decisions, its pending calls), so a study killed
mid-dispatch is finished by `study resume` with nothing decided twice. A run that cannot start
(its key is not set, its prompt changed) or that stops for good (a bad key, a model gone: a
fatal answer) stops alone; the others go on. Nothing here prints but the progress display.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from guardeval.errors import GuardevalError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.runner import RunOutcome, Session, backend_options, session
from guardeval.study.budget import SharedBudget
from guardeval.study.progress import StudyDisplay


@dataclass
class RunOptions:
    """How one run of a study is dispatched (None: the guard config's, or what its launch recorded)."""

    concurrency: int | None = None
    rpm: float | None = None
    max_cost: float | None = None          # this run's own cap (`--guard-max-cost LABEL=USD`)
    fixed_concurrency: bool | None = None
    rate_limit_stop_s: float | None = None
    max_calls: int | None = None
    retry_failed: tuple[str, ...] | None = None
    base_url: str | None = None


@dataclass
class RunDispatch:
    """What one run's session did: its outcome, or why it did not run or did not finish."""

    label: str
    outcome: RunOutcome | None = None
    error: GuardevalError | None = None


@dataclass
class StudyDispatch:
    runs: dict[str, RunDispatch] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    interrupted: str | None = None          # `signal SIGTERM` when a signal stopped the study


def dispatch_runs(folders: Mapping[str, RunFolder], options: Mapping[str, RunOptions], *,
                  max_cost: float | None = None, spent_elsewhere: float = 0.0, progress: bool = True,
                  handle_signals: bool = True) -> StudyDispatch:
    """Dispatch the runs `folders` (label -> run folder) together; `max_cost` is the study's
    budget, `spent_elsewhere` what the study's other runs have spent."""
    out = StudyDispatch()
    pool = SharedBudget(max_cost, spent_elsewhere)
    display = StudyDisplay(list(folders), enabled=progress)
    opened: list[tuple[str, Any, Session]] = []
    try:
        for label, folder in folders.items():
            o = options.get(label) or RunOptions()
            own_cap = _cap(o.max_cost, max_cost)
            cm = session(folder, base_url=o.base_url, concurrency=o.concurrency, rpm=o.rpm, max_cost=own_cap,
                         max_calls=o.max_calls, progress=False, handle_signals=False,
                         adaptive=not o.fixed_concurrency, retry_failed=o.retry_failed,
                         rate_limit_stop_s=o.rate_limit_stop_s)
            try:
                s = cm.__enter__()
            except GuardevalError as exc:       # this run cannot start; the others can
                out.runs[label] = RunDispatch(label, error=exc)
                continue
            s.options.budget_type = pool.member(label, _in_flight_of(s))
            s.options.progress_type = display.line_type(label)
            opened.append((label, cm, s))
        failures: dict[str, BaseException] = {}
        if opened:
            with display:
                anyio.run(_together, [s for _, _, s in opened], [x for x, _, _ in opened], failures, out,
                          handle_signals, backend_options=backend_options())
    except BaseException:
        info = sys.exc_info()
        for _, cm, _ in reversed(opened):
            try:
                cm.__exit__(*info)
            except BaseException:   # noqa: BLE001 - the first error is the one raised
                pass
        raise
    unexpected: BaseException | None = None
    for label, cm, s in opened:
        failed = failures.get(label)
        try:
            if failed is not None:
                cm.__exit__(type(failed), failed, failed.__traceback__)   # closes the run's logs
                raise failed
            cm.__exit__(None, None, None)
            out.runs[label] = RunDispatch(label, outcome=s.finished())
        except GuardevalError as error:
            out.runs[label] = RunDispatch(label, error=error)
        except Exception as error:   # noqa: BLE001 - a fault of ours: raised once every run is closed
            unexpected = unexpected or error
    if unexpected is not None:
        raise unexpected
    out.budget = pool.record()
    return out


def _cap(own: float | None, study: float | None) -> float | None:
    """The run's own budget: its cap, else the study's (the run's spend never exceeds the study's;
    the run's budget also prices what the provider does not), the lower of both when both."""
    caps = [c for c in (own, study) if c is not None]
    return min(caps) if caps else None


def _in_flight_of(s: Session) -> Any:
    return lambda: s.dispatcher.in_flight if s.dispatcher is not None else 0


async def _together(sessions: Sequence[Session], labels: Sequence[str], failures: dict[str, BaseException],
                    out: StudyDispatch, handle_signals: bool) -> None:
    remaining = len(sessions)

    async def one(s: Session, label: str, scope: anyio.CancelScope) -> None:
        nonlocal remaining
        try:
            await s.dispatch()
        except Exception as exc:   # noqa: BLE001 - one run's fault stops that run, not the study
            failures[label] = exc
        finally:
            remaining -= 1
            if not remaining:
                scope.cancel()     # every run has ended: stop the watcher

    async def watch() -> None:
        # One watcher for the study (a dispatcher's own would replace the others'): a signal
        # stops every run as it would stop one, calls in flight left pending. Started after the
        # runs, whose dispatchers exist by then.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                out.interrupted = f"signal {signal.Signals(signum).name}"
                for s in sessions:
                    if s.dispatcher is not None:
                        s.dispatcher.interrupt(out.interrupted)
                return

    async with anyio.create_task_group() as tg:
        for s, label in zip(sessions, labels):
            tg.start_soon(one, s, label, tg.cancel_scope)
        if handle_signals:
            tg.start_soon(watch)

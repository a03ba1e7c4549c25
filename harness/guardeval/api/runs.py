"""Plan, launch, resume and replicate runs; read their status; verify them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guardeval.api.types import LaunchPlan, Problem, Projection, RunResult, RunStatus, Skipped, VerifyReport
from guardeval.backends.config import GuardConfig
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.run import Run

Guard = str | Path | GuardConfig   # a TOML file, a preset name, or a GuardConfig


def _summary(plan: Any, run_dir: Path, parent_run: Run | None = None) -> LaunchPlan:
    plan.digest()   # the schedule's hash as it would be written; writes nothing
    m, cfg = plan.manifest, plan.config
    parent = m.get("parent_run") or {}
    return LaunchPlan(run_id=m["run_id"], run_dir=run_dir, n_calls=plan.n_calls, bases=len(plan.cohort.base_ids),
                      conditions=[c.name for c in plan.cohort.conditions], reps=int(m["reps"]), order=m["order"],
                      seed=int(m["seed"]), guard=cfg.name, backend=cfg.backend, model=cfg.model,
                      prompt=plan.prompt.id, schedule_sha256=m["schedule_sha256"], parent_run=parent.get("run_id"),
                      projection=Projection(**plan.projection()), _plan=plan, _parent=parent_run)


def plan_launch(cohort: str | Path, guard: Guard, *, reps: int = 3, seed: int = 0, order: str = "rounds",
         run_dir: str | Path | None = None, base_url: str | None = None,
         row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> LaunchPlan:
    """Prepare a launch: load and check the cohort and the guard (a python guard's callable is
    imported), render every instance, hash the schedule. Writes nothing; `launch_plan` runs it.
    `cohort` is a folder or `"demo"`; `guard` a TOML file, a preset name or a GuardConfig."""
    from guardeval.run.planning import plan_launch as runner_plan
    from guardeval.run.planning import resolve_run_dir

    p = runner_plan(cohort_dir=cohort, guard_path=guard, reps=reps, seed=seed, order=order,
                    base_url=base_url, row_limits=row_limits)
    return _summary(p, resolve_run_dir(run_dir, p.manifest["run_id"]))


def plan_replicate(run: str | Path | Run, guard: Guard, *, run_dir: str | Path | None = None,
                   base_url: str | None = None, row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> LaunchPlan:
    """Prepare a replicate: `run`'s schedule, byte for byte, on another guard. Writes nothing."""
    from guardeval.run.planning import plan_replicate as runner_plan
    from guardeval.run.planning import resolve_run_dir

    # Held by the plan, not closed here: it reads the parent's schedule again when it is written,
    # through this folder; `launch_plan` closes it then (a Run given stays its caller's).
    parent = Run.open(run)
    owned = parent if parent is not run else None
    try:
        p = runner_plan(parent.folder, guard_path=guard, base_url=base_url, row_limits=row_limits)
        return _summary(p, resolve_run_dir(run_dir, p.manifest["run_id"]), owned)
    except BaseException:
        if owned is not None:
            owned.close()
        raise


def launch_plan(planned: LaunchPlan, *, base_url: str | None = None, concurrency: int | None = None,
                rpm: float | None = None, max_cost: float | None = None, max_calls: int | None = None,
                fixed_concurrency: bool = False, progress: bool = False,
                row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> RunResult:
    """Write the planned run folder and send its calls. The OpenRouter preflight is the CLI's
    (`guardeval preflight`); refusals (a bad folder, an unset key) raise InputError first."""
    from guardeval.run import launch_options
    from guardeval.run.folder.create import check_new_run_dir, discard_unstarted
    from guardeval.run.planning import materialise

    try:
        check_new_run_dir(planned.run_dir)
        # Recorded as the CLI's launch records them, so a later resume (any caller) reuses them.
        planned._plan.manifest[launch_options.FIELD] = launch_options.record(
            {"concurrency": concurrency, "fixed_concurrency": fixed_concurrency or None, "rpm": rpm,
             "max_cost": max_cost, "rate_limit_stop_s": None})
        materialise(planned._plan, planned.run_dir)
    finally:
        if planned._parent is not None:
            planned._parent.close()   # a replicate's parent: its schedule is copied
    try:
        return _execute(planned.run_dir, base_url=base_url, concurrency=concurrency, rpm=rpm, max_cost=max_cost,
                        max_calls=max_calls, fixed_concurrency=fixed_concurrency, progress=progress,
                        row_limits=row_limits)
    except InputError:
        discard_unstarted(planned.run_dir)   # refused before anything was sent: nothing left behind
        raise


def launch(cohort: str | Path, guard: Guard, *, reps: int = 3, seed: int = 0, order: str = "rounds",
           run_dir: str | Path | None = None, base_url: str | None = None, concurrency: int | None = None,
           rpm: float | None = None, max_cost: float | None = None, max_calls: int | None = None,
           fixed_concurrency: bool = False, progress: bool = False,
           row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> RunResult:
    """`plan_launch` then `launch_plan`: a new run folder (default `runs/<run-id>/`), every call sent
    (or the first `max_calls`). A stop (fatal error, budget, signal) is in the result:
    `result.raise_if_stopped()` raises it as the CLI does."""
    planned = plan_launch(cohort, guard, reps=reps, seed=seed, order=order, run_dir=run_dir, base_url=base_url,
                   row_limits=row_limits)
    return launch_plan(planned, base_url=base_url, concurrency=concurrency, rpm=rpm, max_cost=max_cost,
                       max_calls=max_calls, fixed_concurrency=fixed_concurrency, progress=progress,
                       row_limits=row_limits)


def replicate(run: str | Path | Run, guard: Guard, *, run_dir: str | Path | None = None, base_url: str | None = None,
              concurrency: int | None = None, rpm: float | None = None, max_cost: float | None = None,
              fixed_concurrency: bool = False, progress: bool = False,
              row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> RunResult:
    """`run`'s schedule on another guard, into a new run folder (`compare` the two afterwards)."""
    planned = plan_replicate(run, guard, run_dir=run_dir, base_url=base_url, row_limits=row_limits)
    return launch_plan(planned, base_url=base_url, concurrency=concurrency, rpm=rpm, max_cost=max_cost,
                       fixed_concurrency=fixed_concurrency, progress=progress, row_limits=row_limits)


def resume(run: str | Path | RunFolder | Run, *, base_url: str | None = None, concurrency: int | None = None,
           rpm: float | None = None, max_cost: float | None = None, max_calls: int | None = None,
           fixed_concurrency: bool | None = None, progress: bool = False, allow_changed_callable: bool = False,
           retry_failed: Sequence[str] | None = None, rate_limit_stop_s: float | None = None,
           row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> RunResult:
    """Send a stopped or crashed run's undecided calls; with `retry_failed` (failure statuses,
    e.g. `("exhausted",)`), also the calls whose decision has one of them (`resume --retry-failed`).
    An option left None (`concurrency`, `fixed_concurrency`, `rpm`, `max_cost`,
    `rate_limit_stop_s`) is the launch's, as recorded in its manifest: a budget is never forgotten
    (`Run.resume` applies it). Refuses (InputError) a changed prompt rendering, or a python guard
    whose code changed since launch unless `allow_changed_callable`."""
    options: dict[str, Any] = {
        "base_url": base_url, "concurrency": concurrency, "rpm": rpm, "max_cost": max_cost, "max_calls": max_calls,
        "fixed_concurrency": fixed_concurrency, "progress": progress, "handle_signals": _main_thread(),
        "row_limits": row_limits, "rate_limit_stop_s": rate_limit_stop_s,
        "allow_changed_callable": allow_changed_callable}
    with Run.using(run) as r:
        outcome = r.retry(retry_failed, **options) if retry_failed is not None else r.resume(**options)
    return _result(outcome)


def _execute(run_dir: Path | RunFolder, *, base_url: str | None, concurrency: int | None, rpm: float | None,
             max_cost: float | None, max_calls: int | None, fixed_concurrency: bool, progress: bool,
             row_limits: RowLimits, allow_changed_callable: bool = False,
             retry_failed: tuple[str, ...] | None = None, rate_limit_stop_s: float | None = None) -> RunResult:
    from guardeval.run.runner import execute

    with Run.using(run_dir) as r:
        o = execute(r.folder, base_url=base_url, concurrency=concurrency, rpm=rpm, max_cost=max_cost,
                    max_calls=max_calls, progress=progress, adaptive=not fixed_concurrency, row_limits=row_limits,
                    allow_changed_callable=allow_changed_callable, retry_failed=retry_failed,
                    rate_limit_stop_s=rate_limit_stop_s,
                    handle_signals=_main_thread())
    return _result(o)


def _result(o: Any) -> RunResult:
    r = o.result
    return RunResult(run_dir=o.run_dir, total=o.total, decided=o.decided, complete=o.complete,
                     statuses=dict(o.statuses), session_dispatched=r.dispatched, session_decided=r.decided,
                     recovered=o.recovered, torn=list(o.torn), stop_reason=r.stop_reason,
                     fatal_message=r.fatal_message, fingerprint=o.fingerprint,
                     failure_causes=list(o.failure_causes), _outcome=o)


def _main_thread() -> bool:
    # Signal handlers can only be installed from the main thread (a notebook's may not be).
    import threading

    return threading.current_thread() is threading.main_thread()


def status(run: str | Path | RunFolder | Run) -> RunStatus:
    """Decided and pending calls, statuses, quarantine, attempts, spend, and whether a process
    runs it now (`guardeval status`)."""
    with Run.using(run) as r:
        return RunStatus.from_dict(r.status())


def verify(run: str | Path | RunFolder | Run, *, allow_skipped: bool = False, expect: str | None = None,
           row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> VerifyReport:
    """Every hash, the schedule, the stimuli, the chain, every decision, a python guard's code
    (`guardeval verify`); with `expect`, the run's fingerprint must be that one
    (`verify --expect`)."""
    from guardeval.run.integrity.fingerprint import parse_token
    token = parse_token(expect) if expect is not None else None
    with Run.using(run) as r:
        rep = r.verify(allow_skipped=allow_skipped, row_limits=row_limits, expect=token)
    return VerifyReport(ok=rep["ok"], problems=[Problem(p["file"], p.get("line"), p["message"]) for p in rep["problems"]],
                        skipped=[Skipped(s["check"], s["reason"]) for s in rep["skipped"]], checked=rep["checked"],
                        n_calls=rep.get("n_calls"), n_raw=rep.get("n_raw"), n_decisions=rep.get("n_decisions"),
                        undecided_answers=rep.get("undecided_answers"), fingerprint=rep.get("fingerprint"))

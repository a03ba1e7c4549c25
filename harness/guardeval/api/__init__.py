"""guardeval's public Python API: what the `guardeval` command does, as typed functions.

    from guardeval import api

    run = api.launch("demo", "python-example", reps=3)      # cohort folder or "demo"; guard file, preset or config
    api.verify(run.run_dir).ok
    est = api.estimate(run.run_dir)                         # typed: est.effects[i].delta, .ci, .p_holm
    rows = api.calls(run.run_dir)                           # one CallRecord per scheduled call
    frame = api.calls_frame(run.run_dir, "pandas")          # needs pandas (or "polars"), not a dependency

Stable: the names in `__all__` and the fields of the records they return. Everything else in
`guardeval` (modules, functions, report internals) may change between versions. Errors are the
CLI's: `InputError` (bad input, exit 2), `CheckFailed` (a check failed, exit 1), `RunStopped`
(a run stopped, resumable, exit 1), all `GuardevalError`. Nothing here prints; progress is off
unless asked for (`progress=True`).

A study (N guards on one schedule, one folder, one report: docs/study.md): `study_launch`,
`study_resume`, `study_add`, `study_report`, `study_verify`, `study_status`, `study_edit`.

A guard that is a Python function: `python_guard(name, "package.module:function")`, whose
function takes a `GuardInput` and returns text or a `Verdict` (docs/how-to/python-guard.md).
"""

from guardeval.api.guards import load_guard, python_guard
from guardeval.api.results import calls, calls_frame, compare, estimate, estimate_record
from guardeval.api.runs import launch, launch_plan, plan_launch, plan_replicate, replicate, resume, status, verify
from guardeval.api.study import (
    StudyPlanned,
    study_add,
    study_edit,
    study_launch,
    study_launch_plan,
    study_plan,
    study_report,
    study_resume,
    study_status,
    study_verify,
)
from guardeval.api.types import (
    CallRecord,
    Comparison,
    Decision,
    Difference,
    Effect,
    Estimate,
    LaunchPlan,
    Problem,
    Projection,
    RunResult,
    RunStatus,
    Skipped,
    StudyReport,
    StudyResult,
    StudyRun,
    StudyVerifyReport,
    VerifyReport,
)
from guardeval.backends.config import GuardConfig
from guardeval.backends.python_guard.types import GuardInput, Verdict
from guardeval.errors import CheckFailed, GuardevalError, InputError, RunStopped

# A run, opened one way, its parts as read-once properties (the CLI and every function here use it).
from guardeval.run.run import Run

__all__ = [
    "CallRecord", "CheckFailed", "Comparison", "Decision", "Difference", "Effect", "Estimate", "GuardConfig", "GuardInput",
    "GuardevalError", "InputError", "LaunchPlan", "Problem", "Projection", "Run", "RunResult", "RunStatus", "RunStopped",
    "Skipped", "StudyPlanned", "StudyReport", "StudyResult", "StudyRun", "StudyVerifyReport", "Verdict",
    "VerifyReport",
    "calls", "calls_frame", "compare", "estimate", "estimate_record", "launch", "launch_plan", "load_guard",
    "plan_launch", "plan_replicate", "python_guard", "replicate", "resume", "status", "study_add", "study_edit",
    "study_launch", "study_launch_plan", "study_plan", "study_report", "study_resume", "study_status",
    "study_verify", "verify",
]

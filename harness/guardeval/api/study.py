"""Studies: N guards on one schedule, one folder, one report (docs/study.md), as typed calls.

    from guardeval import api

    planned = api.study_plan("demo", ["a.toml", "b.toml", "c.toml"], reps=3, seed=1)
    result = api.study_launch_plan(planned)              # every guard's calls, together
    api.study_resume(result.study_dir)                   # after a stop (a fatal answer, a kill)
    rep = api.study_report(result.study_dir)             # rep.answer, rep.most_sensitive["tool_alias"]
    api.study_verify(result.study_dir, expect=rep.fingerprint).ok

Nothing here prints; progress is off unless asked for. `command` is what the study's record
says made each change (default: the API call's name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardeval.api.runs import Guard, _main_thread
from guardeval.api.types import Problem, Skipped, StudyReport, StudyResult, StudyRun, StudyVerifyReport
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import InputError
from guardeval.records import Record
from guardeval.study.record import Question


@dataclass
class StudyPlanned(Record):
    """A study, planned and checked; nothing written yet (`study_launch_plan` writes and runs it)."""

    study_id: str
    study_dir: Path
    labels: list[str]
    n_calls: int                            # per guard: every guard gets the whole schedule
    schedule_sha256: str
    question: Question
    guards: list[dict[str, Any]]            # per guard: label, name, backend, model, base_url, projection
    _plan: Any = field(default=None, repr=False, compare=False)   # guardeval.study.launch.StudyPlan


def study_plan(cohort: str | Path, guards: Sequence[Guard], *, labels: Sequence[str] | None = None, reps: int = 3,
               seed: int = 0, order: str = "rounds", study_dir: str | Path | None = None,
               baseline: str | None = None, placebo: str | None = None, family: Sequence[str] | None = None,
               margin: float | None = None, failure_rule: str | None = None,
               concurrency: int | Mapping[str, int] | None = None, rpm: float | Mapping[str, float] | None = None,
               fixed_concurrency: bool | None = None, rate_limit_stop_s: float | None = None,
               max_calls: int | None = None, max_cost: float | None = None,
               guard_max_cost: Mapping[str, float] | None = None,
               row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> StudyPlanned:
    """Plan a study: every guard's run on one schedule (checked byte-identical), one prompt and
    output schema for all (else InputError), labels (each guard's name unless `labels`), the
    question (each default resolved). `concurrency` and `rpm`: one value, or label -> value;
    `max_cost` is the study's budget, `guard_max_cost` a guard's own cap. Writes nothing."""
    from guardeval.study.launch import plan_study, resolve_study_dir

    plan = plan_study(cohort, guards, labels=labels, reps=reps, seed=seed, order=order, baseline=baseline,
                      placebo=placebo, family=family, margin=margin, failure_rule=failure_rule, row_limits=row_limits)
    plan.set_options(concurrency=concurrency, rpm=rpm, fixed_concurrency=fixed_concurrency,
                     rate_limit_stop_s=rate_limit_stop_s, max_calls=max_calls, max_cost=max_cost,
                     guard_max_cost=guard_max_cost)
    return StudyPlanned(study_id=plan.study_id, study_dir=resolve_study_dir(study_dir, plan.study_id),
                        labels=plan.labels, n_calls=plan.n_calls, schedule_sha256=plan.schedule_sha256,
                        question=plan.question.copy(),
                        guards=[{"label": g.label, "name": g.plan.config.name, "backend": g.plan.config.backend,
                                 "model": g.plan.config.model, "base_url": g.plan.config.effective_base_url,
                                 "projection": g.plan.projection(max_calls)} for g in plan.guards],
                        _plan=plan)


def study_launch_plan(planned: StudyPlanned, *, progress: bool = False,
                      command: Sequence[str] | None = None) -> StudyResult:
    """Write the planned study folder and dispatch every guard's calls together (one process).
    A run that stops for good stops alone: see `StudyResult.stopped`. The OpenRouter preflight
    is the CLI's (`guardeval study launch`); refusals (a folder in use, an unset key) raise first."""
    from guardeval.run.planning import require_key
    from guardeval.study import runs
    from guardeval.study.launch import check_new_study_dir

    check_new_study_dir(planned.study_dir)
    for g in planned._plan.guards:
        require_key(g.plan.config, g.plan.config.source)
    out = runs.launch(planned._plan, planned.study_dir, argv=command or ["guardeval.api.study_launch"],
                      progress=progress, handle_signals=_main_thread())
    return _result(out)


def study_launch(cohort: str | Path, guards: Sequence[Guard], *, labels: Sequence[str] | None = None, reps: int = 3,
                 seed: int = 0, order: str = "rounds", study_dir: str | Path | None = None,
                 baseline: str | None = None, placebo: str | None = None, family: Sequence[str] | None = None,
                 margin: float | None = None, failure_rule: str | None = None,
                 concurrency: int | Mapping[str, int] | None = None, rpm: float | Mapping[str, float] | None = None,
                 fixed_concurrency: bool | None = None, rate_limit_stop_s: float | None = None,
                 max_calls: int | None = None, max_cost: float | None = None,
                 guard_max_cost: Mapping[str, float] | None = None, progress: bool = False,
                 row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> StudyResult:
    """`study_plan` then `study_launch_plan` (`guardeval study launch`)."""
    planned = study_plan(cohort, guards, labels=labels, reps=reps, seed=seed, order=order, study_dir=study_dir,
                         baseline=baseline, placebo=placebo, family=family, margin=margin, failure_rule=failure_rule,
                         concurrency=concurrency, rpm=rpm, fixed_concurrency=fixed_concurrency,
                         rate_limit_stop_s=rate_limit_stop_s, max_calls=max_calls, max_cost=max_cost,
                         guard_max_cost=guard_max_cost, row_limits=row_limits)
    return study_launch_plan(planned, progress=progress)


def _statuses(retry_failed: Sequence[str] | None) -> tuple[str, ...] | None:
    if retry_failed is None:
        return None
    from guardeval.run.folder.supersede import parse_statuses

    try:
        return parse_statuses(",".join(retry_failed))
    except ValueError as exc:
        raise InputError(str(exc), field="retry_failed") from None


def study_resume(study: str | Path, *, concurrency: int | Mapping[str, int] | None = None,
                 rpm: float | Mapping[str, float] | None = None, fixed_concurrency: bool | None = None,
                 rate_limit_stop_s: float | None = None, max_cost: float | None = None,
                 guard_max_cost: Mapping[str, float] | None = None, max_calls: int | None = None,
                 retry_failed: Sequence[str] | None = None, progress: bool = False,
                 command: Sequence[str] | None = None) -> StudyResult:
    """Dispatch every run of the study with calls left (with `retry_failed`, every run's failed
    calls too), together (`guardeval study resume`). Each run's launch options are used again
    unless given here (one value for every run, or label -> value, `*` for the runs not named);
    the study's budget is the recorded one unless `max_cost`."""
    from guardeval.study import runs

    given: dict[str, Any] = {"fixed_concurrency": fixed_concurrency, "rate_limit_stop_s": rate_limit_stop_s}
    per_run: dict[str, dict[str, Any]] = {}
    for name, value in (("concurrency", concurrency), ("rpm", rpm), ("max_cost", guard_max_cost)):
        if isinstance(value, Mapping):
            for label, v in value.items():
                if label == "*":   # every run the mapping does not name
                    given[name] = v
                else:
                    per_run.setdefault(label, {})[name] = v
        elif value is not None:
            given[name] = value
    out = runs.resume(study, given=given, per_run=per_run, max_cost=max_cost, retry_failed=_statuses(retry_failed),
                      max_calls=max_calls, argv=command or ["guardeval.api.study_resume"], progress=progress,
                      handle_signals=_main_thread())
    return _result(out)


def study_add(study: str | Path, guard: Guard, *, label: str | None = None, concurrency: int | None = None,
              rpm: float | None = None, fixed_concurrency: bool | None = None, rate_limit_stop_s: float | None = None,
              max_cost: float | None = None, guard_max_cost: float | None = None, max_calls: int | None = None,
              base_url: str | None = None, progress: bool = False, command: Sequence[str] | None = None) -> StudyResult:
    """A new guard on the study's schedule, byte for byte, recorded and dispatched (`guardeval
    study add`). Refused (InputError): a label the study has, another prompt or output schema."""
    from guardeval.study import runs
    from guardeval.study.dispatch import RunOptions

    o = RunOptions(concurrency=concurrency, rpm=rpm, fixed_concurrency=fixed_concurrency,
                   rate_limit_stop_s=rate_limit_stop_s, max_calls=max_calls, base_url=base_url)
    out = runs.add(study, guard, label=label, options=o, max_cost=max_cost, guard_max_cost=guard_max_cost,
                   argv=command or ["guardeval.api.study_add"], progress=progress, handle_signals=_main_thread())
    return _result(out)


def study_edit(study: str | Path, *, reason: str, baseline: str | None = None, placebo: str | None = None,
               family: Sequence[str] | None = None, margin: float | None = None, failure_rule: str | None = None,
               command: Sequence[str] | None = None) -> Question:
    """Change the study's question, recorded with `reason` (`guardeval study edit`); the question now."""
    from guardeval.study import runs

    record = runs.edit(study, {"baseline": baseline, "placebo": placebo,
                               "family": list(family) if family is not None else None, "margin": margin,
                               "failure_rule": failure_rule}, reason, argv=command or ["guardeval.api.study_edit"])
    question: Question = record["question"]
    return question.copy()


def study_status(study: str | Path) -> dict[str, Any]:
    """Every run's state, which are incomplete, spend, whether a process writes the study now,
    the study fingerprint now (`guardeval study status --json`)."""
    from guardeval.study.status import study_status as status

    return status(study)


def study_verify(study: str | Path, *, expect: str | None = None, allow_skipped: bool = False,
                 row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> StudyVerifyReport:
    """Every run verified and the study's record checked against them; with `expect`, the study
    fingerprint must be that one (`guardeval study verify --expect`)."""
    from guardeval.study.record import parse_token
    from guardeval.study.status import study_verify as verify

    token = parse_token(expect) if expect is not None else None
    rep = verify(study, expect=token, allow_skipped=allow_skipped, row_limits=row_limits)
    return StudyVerifyReport(ok=rep["ok"], problems=[Problem(p["file"], p.get("line"), p["message"])
                                                     for p in rep["problems"]],
                             skipped=[Skipped(f"{s.get('run')}: {s['check']}", s["reason"]) for s in rep["skipped"]],
                             notes=list(rep["notes"]), runs=dict(rep["runs"]), checked=rep["checked"],
                             fingerprint=rep["fingerprint"])


def study_report(study: str | Path, *, n_boot: int = 10000, seed: int = 0, missing: str = "exclude",
                 allow_partial: bool = False, allow_unpublishable: bool = False, write: bool = True,
                 command: Sequence[str] | None = None) -> StudyReport:
    """Every run estimated under the study's question, all compared, the answer in words; with
    `write`, study.html, study.md, study-report.json into the study folder (and each run's
    report files) and the record updated (`guardeval study report`). Incomplete runs: CheckFailed
    unless `allow_partial`."""
    from guardeval.study.record import STUDY_HTML, STUDY_MD, STUDY_REPORT_JSON
    from guardeval.study.report import study_report as report

    rep = report(study, n_boot=n_boot, seed=seed, missing=missing, allow_partial=allow_partial,
                 allow_unpublishable=allow_unpublishable, write=write, argv=command or ["guardeval.api.study_report"])
    ans = rep["answer"]
    folder = Path(rep["study"]["study_dir"])
    return StudyReport(study_dir=folder, fingerprint=rep["fingerprint"]["token"], answer=list(ans["text"]),
                       most_sensitive={a["condition"]: a["most"] for a in ans["conditions"] if a.get("most")},
                       least_sensitive={a["condition"]: a["least"] for a in ans["conditions"] if a.get("least")},
                       holds={a["condition"]: a.get("holds") for a in ans["conditions"]},
                       corrected_effects={g["label"]: list(g["effects"]) for g in ans["guards"]},
                       complete=rep["complete"], publishable=rep["publishable"], excluded=dict(rep.get("excluded") or {}),
                       written=[folder / n for n in (STUDY_HTML, STUDY_MD, STUDY_REPORT_JSON)] if write else [],
                       report=rep)


def _result(out: Any) -> StudyResult:
    from guardeval.study.status import study_status as status

    st = status(out.study_dir)
    runs = []
    for r in st["runs"]:
        label = r["label"]
        done = out.runs.get(label)
        outcome = done.outcome if done is not None else None
        res = outcome.result if outcome is not None else None
        runs.append(StudyRun(label=label, run_dir=out.study_dir / "runs" / label, dispatched=done is not None,
                             complete=bool(r["complete"]), decided=r.get("decided"), total=r.get("n_calls"),
                             statuses=dict(r.get("statuses") or {}), stop_reason=res.stop_reason if res else None,
                             fatal_message=res.fatal_message if res else None, fingerprint=r.get("fingerprint"),
                             error=str(done.error) if done is not None and done.error is not None else None,
                             failure_causes=list(r.get("failure_causes") or [])))
    return StudyResult(study_dir=out.study_dir, runs=runs, complete=st["complete"], incomplete=st["incomplete"],
                       spend_usd=st["spend_usd"], max_cost=out.budget.get("max_cost"), interrupted=out.interrupted,
                       fingerprint=st["fingerprint"])

"""Planning a study and writing its folder (docs/study.md): N guards on one cohort and one seeded
schedule, every bad input refused before anything is written.

Each guard is planned as `launch` plans a run (`guardeval.run.planning.plan_launch`, the same
cohort, repetitions, seed and order): the schedule does not depend on the guard, so every plan's
schedule.jsonl is byte-identical, which is checked (its SHA-256) before the folder exists. The
guards must ask one question of one stimulus set: the same prompt (its files, parser and output
schema: the prompt's SHA-256), or the study is refused. Labels name the runs' folders: each
guard's name unless `--label` gives one; two guards of one name without labels are refused,
both named.

The study folder is built beside its place and renamed into it (`guardeval.run.folder.create.build_beside`,
as a run folder is): `runs/<label>/` for each guard (each a run folder of its own), study.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from guardeval import __version__
from guardeval.backends.config import GuardConfig
from guardeval.backends.prompts import Prompt
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, Cohort, RowLimits
from guardeval.errors import GuardevalError, InputError
from guardeval.run import launch_options
from guardeval.run.folder.create import build_beside, check_new_run_dir
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import utcnow
from guardeval.run.planning import Plan, materialise_in, plan_launch
from guardeval.study.dispatch import RunOptions
from guardeval.study.question import resolve_question
from guardeval.study.record import RUNS_DIR, STUDY_JSON, Question, check_label, command, run_entry, write_record

DEFAULT_STUDIES_ROOT = Path("studies")
GuardSource = str | Path | GuardConfig
T = TypeVar("T", int, float)


def per_guard(value: T | Mapping[str, T] | None, labels: Sequence[str], flag: str) -> dict[str, T]:
    """label -> value: one value for every label, or a mapping whose keys must be labels (`*`:
    the value of every label the mapping does not name)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return dict.fromkeys(labels, value)
    unknown = sorted(set(value) - set(labels) - {"*"})
    if unknown:
        raise InputError(f"no guard of the study is labelled {unknown[0]!r} (labels: {', '.join(labels)})", field=flag)
    rest = dict.fromkeys(labels, value["*"]) if "*" in value else {}
    return {**rest, **{k: v for k, v in value.items() if k != "*"}}


@dataclass
class StudyGuard:
    label: str
    plan: Plan
    options: RunOptions = field(default_factory=RunOptions)


@dataclass
class StudyPlan:
    study_id: str
    cohort: Cohort
    guards: list[StudyGuard]
    question: Question
    schedule_sha256: str
    max_cost: float | None = None
    per_guard: dict[str, float] = field(default_factory=dict)

    @property
    def labels(self) -> list[str]:
        return [g.label for g in self.guards]

    def set_options(self, *, concurrency: int | Mapping[str, int] | None = None,
                    rpm: float | Mapping[str, float] | None = None,
                    fixed_concurrency: bool | None = None, rate_limit_stop_s: float | None = None,
                    max_calls: int | None = None, max_cost: float | None = None,
                    guard_max_cost: Mapping[str, float] | None = None) -> None:
        """Each guard's dispatch options (`concurrency`, `rpm`: one value for every guard, or
        label -> value) and the budget: the study's `max_cost`, a guard's own cap by label."""
        conc, rates = per_guard(concurrency, self.labels, "--concurrency"), per_guard(rpm, self.labels, "--rpm")
        caps = per_guard(dict(guard_max_cost or {}), self.labels, "--guard-max-cost")
        for g in self.guards:
            g.options = RunOptions(concurrency=conc.get(g.label), rpm=rates.get(g.label),
                                   fixed_concurrency=fixed_concurrency, rate_limit_stop_s=rate_limit_stop_s,
                                   max_calls=max_calls)
        self.max_cost = max_cost
        self.per_guard = {k: float(v) for k, v in caps.items()}

    @property
    def n_calls(self) -> int:
        """Calls per guard (every run has the whole schedule)."""
        return self.guards[0].plan.n_calls


def _source_name(source: GuardSource) -> str:
    return source.source or source.name if isinstance(source, GuardConfig) else str(source)


def labels_for(configs: Sequence[GuardConfig], sources: Sequence[GuardSource], labels: Sequence[str] | None
               ) -> list[str]:
    """Each guard's label: `labels` when given (one per guard), else its config's name; two
    guards of one name without labels, or two equal labels, are refused, naming both."""
    if labels:
        if len(labels) != len(configs):
            raise InputError(f"{len(labels)} --label for {len(configs)} --guard: give one label per guard, in order",
                             field="--label")
        chosen = [check_label(x, "--label") for x in labels]
    else:
        chosen = [check_label(c.name, "--guard") for c in configs]
    seen: dict[str, int] = {}
    for i, label in enumerate(chosen):
        if label in seen:
            j = seen[label]
            how = "are both labelled" if labels else "are both named"
            raise InputError(f"guards {_source_name(sources[j])} and {_source_name(sources[i])} {how} {label!r}: "
                             "give each its own --label (labels name the runs of a study)", field="--label")
        seen[label] = i
    return chosen


def check_one_stimulus(prompts: Sequence[Prompt], labels: Sequence[str], sources: Sequence[object]) -> None:
    """Every guard renders the same prompt (files, parser, output schema) and so asks one question;
    InputError naming the first guard that does not (`sources`: where each guard was read)."""
    first = prompts[0]
    for p, label, source in zip(prompts[1:], labels[1:], sources[1:]):
        if p.sha256 == first.sha256:
            continue
        what = "output schema" if p.output_schema != first.output_schema else \
            "parser" if p.parser != first.parser else "prompt"
        raise InputError(f"guard {label!r} uses prompt {p.id!r} ({p.sha256[:12]}…) and guard {labels[0]!r} prompt "
                         f"{first.id!r} ({first.sha256[:12]}…): their {what} differs. A study compares guards on one "
                         "stimulus set: give them one prompt, or run them as separate studies",
                         path=source, field="prompt")


def plan_study(cohort: str | Path, guards: Sequence[GuardSource], *, labels: Sequence[str] | None = None,
               reps: int = 3, seed: int = 0, order: str = "rounds", base_url: str | None = None,
               baseline: str | None = None, placebo: str | None = None, family: Sequence[str] | None = None,
               margin: float | None = None, failure_rule: str | None = None, study_id: str | None = None,
               row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> StudyPlan:
    """Plan every guard's run and check that they make one study; writes nothing. The dispatch
    options and the budget are set afterwards, by label (`StudyPlan.set_options`)."""
    if len(guards) < 2:
        raise InputError(f"a study compares two guards or more; got {len(guards)} --guard (add more later with "
                         "`guardeval study add`)", field="--guard")
    plans = [plan_launch(cohort_dir=cohort, guard_path=g, reps=reps, seed=seed, order=order, base_url=base_url,
                         row_limits=row_limits) for g in guards]
    names = labels_for([p.config for p in plans], guards, labels)
    check_one_stimulus([p.prompt for p in plans], names, [p.config.source for p in plans])
    first = plans[0]
    question = resolve_question([(c.name, c.role) for c in first.cohort.conditions], baseline=baseline,
                                placebo=placebo, family=family, margin=margin, failure_rule=failure_rule)
    shas: list[str] = []
    for plan in plans:
        # hashes the schedule as it would be written; writes nothing
        shas.append(plan.digest()["schedule_sha256"])
    if len(set(shas)) != 1:   # the schedule does not depend on the guard: this cannot happen
        raise InputError("the guards' schedules differ: not one study")
    return StudyPlan(study_id or _study_id(), first.cohort,
                     [StudyGuard(label, plan) for label, plan in zip(names, plans)], question, shas[0])


def _study_id() -> str:
    from guardeval.run.folder.layout import new_run_id

    return new_run_id("study")


def resolve_study_dir(study_dir: str | Path | None, study_id: str, root: Path = DEFAULT_STUDIES_ROOT) -> Path:
    return Path(study_dir) if study_dir else root / study_id


def check_new_study_dir(study_dir: Path) -> None:
    check_new_run_dir(study_dir, "study folder")


def create_study(plan: StudyPlan, study_dir: Path, *, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the study folder: every guard's run folder (`runs/<label>/`), then study.json; built
    beside and renamed into place, so a failure (or a kill) leaves no half-made study. Returns
    the record as written."""
    for g in plan.guards:
        o = g.options
        # Each run's manifest records its own dispatch options: `guardeval resume` of one run
        # alone, and `study resume`, use them again.
        g.plan.manifest[launch_options.FIELD] = launch_options.record({
            "concurrency": o.concurrency, "fixed_concurrency": o.fixed_concurrency, "rpm": o.rpm,
            "max_cost": plan.per_guard.get(g.label, plan.max_cost), "rate_limit_stop_s": o.rate_limit_stop_s})

    def build(folder: RunFolder) -> dict[str, Any]:
        runs = []
        folder.make_dir(RUNS_DIR)   # through the partial folder's descriptor, never through a link
        for g in plan.guards:
            try:
                materialise_in(g.plan, folder, f"{RUNS_DIR}/{g.label}")
            except (OSError, GuardevalError):
                folder.check_same_dir(RUNS_DIR)   # a link put in place of runs/ is what to name
                raise
            runs.append(run_entry(g.label, g.plan.manifest))
        # Renamed into place next: runs/ must still be the folder the runs went into.
        folder.check_same_dir(RUNS_DIR)
        m = plan.guards[0].plan.manifest
        record = {
            "format": "guardeval-study/1", "study_id": plan.study_id, "created": utcnow(),
            "guardeval_version": __version__,
            "cohort": {"name": m["cohort"]["name"], "sha256": m["cohort"]["sha256"],
                       "instances_sha256": m["cohort"]["instances_sha256"]},
            "schedule": {"sha256": plan.schedule_sha256, "n_calls": plan.n_calls, "seed": m["seed"],
                         "order": m["order"], "reps": m["reps"]},
            "prompt": {"id": m["prompt"]["id"], "sha256": m["prompt"]["sha256"], "parser": m["prompt"]["parser"]},
            "question": plan.question, "question_at_launch": plan.question, "edits": [],
            "budget": {"max_cost": plan.max_cost, "per_guard": plan.per_guard},
            "runs": runs, "report": None, "commands": [command(argv)],
        }
        return write_record(folder, record)

    return build_beside(study_dir, build, what="study folder", content=_PARTIAL_CONTENT)


# What a partial study folder can hold (its runs' folder and its record).
_PARTIAL_CONTENT = frozenset({".partial-lock", RUNS_DIR, STUDY_JSON})

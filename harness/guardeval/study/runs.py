"""A study's runs, checked against its record and dispatched: `study launch` (write the folder,
send every guard's calls), `study resume` (every run not finished, or with `--retry-failed`
every run, together), `study add` (a new guard on the same schedule, later) and `study edit`
(a recorded change of the question). Each holds the study's lock (one writer of a study) and
appends itself to the record's `commands`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import CheckFailed, InputError
from guardeval.run import launch_options
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.manifest import load_run_prompt, read_manifest
from guardeval.run.planning import materialise, plan_replicate
from guardeval.run.status import run_status
from guardeval.study.dispatch import RunDispatch, RunOptions, StudyDispatch, dispatch_runs
from guardeval.study.launch import GuardSource, StudyPlan, check_one_stimulus, create_study
from guardeval.study.question import edited
from guardeval.study.record import (
    RUNS_DIR,
    StudyLock,
    check_label,
    command,
    open_run,
    open_study,
    read_record,
    run_entry,
    write_record,
)
from guardeval.study.status import require_intact


@dataclass
class StudyOutcome:
    """What one `study launch|resume|add` did, run by run."""

    study_dir: Path
    runs: dict[str, RunDispatch]                 # the runs dispatched (or refused) in this command
    complete: dict[str, bool] = field(default_factory=dict)   # every run of the study: all calls decided?
    budget: dict[str, Any] = field(default_factory=dict)
    interrupted: str | None = None


def open_runs(study: RunFolder, record: Mapping[str, Any], held: ExitStack, labels: Sequence[str] | None = None
              ) -> dict[str, RunFolder]:
    """The recorded runs (or those of `labels`), each checked to be the run the record names
    (its run id and manifest): CheckFailed for a run replaced or removed. Each is closed by
    `held`, the caller's `with ExitStack()`."""
    wanted = [r for r in record["runs"] if labels is None or r["label"] in labels]
    out: dict[str, RunFolder] = {}
    for entry in wanted:
        label = entry["label"]
        try:
            folder = held.enter_context(open_run(study, label)).folder
            manifest = read_manifest(folder)
        except InputError as exc:
            raise CheckFailed(f"{study.file(RUNS_DIR)}/{label}: the study's run {label!r} cannot be opened ({exc}); "
                              f"`guardeval study verify {study.path}` says more") from None
        if manifest["run_id"] != entry["run_id"] or manifest["sha256"] != entry["manifest_sha256"]:
            raise CheckFailed(f"{folder.path}: not the run the study recorded for {label!r} (run {entry['run_id']}, "
                              f"manifest {entry['manifest_sha256'][:12]}…; found run {manifest['run_id']!s:.80}): "
                              "replaced? `guardeval study verify` says more")
        out[label] = folder
    return out


def _spent(folders: Mapping[str, RunFolder]) -> float:
    return sum(float(run_status(f)["spend_usd"]) for f in folders.values())


def _dispatch(study: RunFolder, record: Mapping[str, Any], folders: Mapping[str, RunFolder],
              options: Mapping[str, RunOptions], others: Mapping[str, RunFolder], *, max_cost: float | None,
              progress: bool, handle_signals: bool) -> StudyOutcome:
    done = dispatch_runs(folders, options, max_cost=max_cost, spent_elsewhere=_spent(others) if max_cost is not None else 0.0,
                         progress=progress, handle_signals=handle_signals)
    return _outcome(study, record, done)


def _outcome(study: RunFolder, record: Mapping[str, Any], done: StudyDispatch) -> StudyOutcome:
    complete: dict[str, bool] = {}
    for entry in record["runs"]:
        r = done.runs.get(entry["label"])
        if r is not None and r.outcome is not None:
            complete[entry["label"]] = r.outcome.complete
        else:
            try:
                with open_run(study, entry["label"]) as run:
                    complete[entry["label"]] = bool(run.status()["complete"])
            except InputError:
                complete[entry["label"]] = False
    return StudyOutcome(study.path, done.runs, complete, done.budget, done.interrupted)


def launch(plan: StudyPlan, study_dir: Path, *, argv: Sequence[str] | None = None, progress: bool = False,
           handle_signals: bool = True) -> StudyOutcome:
    """Write the study folder and dispatch every guard's calls together."""
    record = create_study(plan, study_dir, argv=argv)
    with open_study(study_dir) as study, StudyLock(study), ExitStack() as held:
        folders = open_runs(study, record, held)
        options = {g.label: RunOptions(**{**vars(g.options), "max_cost": plan.per_guard.get(g.label)})
                   for g in plan.guards}
        return _dispatch(study, record, folders, options, {}, max_cost=plan.max_cost, progress=progress,
                         handle_signals=handle_signals)


def resume(study_dir: str | Path, *, given: Mapping[str, Any] | None = None,
           per_run: Mapping[str, Mapping[str, Any]] | None = None, max_cost: float | None = None,
           retry_failed: tuple[str, ...] | None = None, max_calls: int | None = None, base_url: str | None = None,
           argv: Sequence[str] | None = None, progress: bool = False, handle_signals: bool = True,
           row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> StudyOutcome:
    """Dispatch every run of the study that has calls left (with `retry_failed`, every run: its
    failed calls get new attempts), together. Each run uses the dispatch options its launch
    recorded unless `given` (every run) or `per_run` (label -> options) says otherwise; the
    study's budget is the record's unless `max_cost` is given."""
    with open_study(study_dir, "resume") as study, StudyLock(study), ExitStack() as held:
        record = read_record(study)
        folders = open_runs(study, record, held)
        unknown = sorted(set(per_run or {}) - set(folders))
        if unknown:
            raise InputError(f"no run of the study is labelled {unknown[0]!r} (labels: {', '.join(folders)})",
                             field="LABEL=")
        todo: dict[str, RunFolder] = {}
        others: dict[str, RunFolder] = {}
        for label, folder in folders.items():
            (todo if retry_failed is not None or not run_status(folder)["complete"] else others)[label] = folder
        record = write_record(study, {**record, "commands": [*record["commands"], command(argv)]})
        options = {label: _resumed(folder, {**(given or {}), **(per_run or {}).get(label, {})}, record, label,
                                   retry_failed, max_calls, base_url)
                   for label, folder in todo.items()}
        budget = record["budget"]["max_cost"] if max_cost is None else max_cost
        return _dispatch(study, record, todo, options, others, max_cost=budget, progress=progress,
                         handle_signals=handle_signals)


def _resumed(folder: RunFolder, given: Mapping[str, Any], record: Mapping[str, Any], label: str,
             retry_failed: tuple[str, ...] | None, max_calls: int | None, base_url: str | None) -> RunOptions:
    """One run's options on resume: each given one, else what its launch recorded (as `resume`)."""
    manifest = read_manifest(folder)
    recorded = launch_options.recorded(manifest, folder.file("manifest.json"))
    merged, _ = launch_options.merged(given, recorded)
    cap = record["budget"]["per_guard"].get(label)
    return RunOptions(concurrency=merged["concurrency"], rpm=merged["rpm"],
                      max_cost=given.get("max_cost", cap), fixed_concurrency=merged["fixed_concurrency"],
                      rate_limit_stop_s=merged["rate_limit_stop_s"], max_calls=max_calls, retry_failed=retry_failed,
                      base_url=base_url)


def add(study_dir: str | Path, guard: GuardSource, *, label: str | None = None, options: RunOptions | None = None,
        max_cost: float | None = None, guard_max_cost: float | None = None, argv: Sequence[str] | None = None,
        progress: bool = False, handle_signals: bool = True, row_limits: RowLimits = DEFAULT_ROW_LIMITS
        ) -> StudyOutcome:
    """A new guard on the study's schedule, byte for byte (its first run's, as `replicate` copies
    it), recorded and dispatched. Refused (InputError, nothing written): a label the study has,
    another prompt or output schema, a first run whose cohort or schedule is not the study's."""
    with open_study(study_dir, "replicate") as study, StudyLock(study), ExitStack() as held:
        record = read_record(study)
        require_intact(study, record)
        folders = open_runs(study, record, held)
        first_label = record["runs"][0]["label"]
        parent = folders[first_label]
        pm = read_manifest(parent)
        where = parent.file("manifest.json")
        if pm["cohort"]["sha256"] != record["cohort"]["sha256"]:
            raise InputError(f"the study's first run {first_label!r} is on another cohort ({pm['cohort']['sha256'][:12]}…) "
                             f"than the study ({record['cohort']['sha256'][:12]}…): refused", path=where,
                             field="cohort.sha256")
        if pm["schedule_sha256"] != record["schedule"]["sha256"]:
            raise InputError(f"the study's first run {first_label!r} has another schedule "
                             f"({str(pm['schedule_sha256'])[:12]}…) than the study ({record['schedule']['sha256'][:12]}…): "
                             "refused", path=where, field="schedule_sha256")
        plan = plan_replicate(parent, guard_path=guard, base_url=options.base_url if options else None,
                              row_limits=row_limits)
        name = check_label(label or plan.config.name, "--label")
        if name in folders:
            raise InputError(f"the study already has a run labelled {name!r}: give the new guard another --label",
                             field="--label")
        check_one_stimulus([load_run_prompt(parent, pm), plan.prompt], [first_label, name],
                           [where, plan.config.source])
        o = options or RunOptions()
        plan.manifest[launch_options.FIELD] = launch_options.record({
            "concurrency": o.concurrency, "fixed_concurrency": o.fixed_concurrency, "rpm": o.rpm,
            "max_cost": guard_max_cost, "rate_limit_stop_s": o.rate_limit_stop_s})
        # Through the study's descriptor, as `study launch` does: runs/ opened never through a
        # link, the run built and renamed inside the folder opened, and that folder still the
        # study's runs/ before the record names the run (a link swapped in meanwhile: refused).
        with study.folder(RUNS_DIR) as runs:
            materialise(plan, runs.file(name), parent=runs)
            with study.folder(RUNS_DIR) as now:
                if now.identity() != runs.identity():
                    raise InputError("was replaced while the new run was being created; the study's record is "
                                     "unchanged", path=study.file(RUNS_DIR))
        if plan.manifest["schedule_sha256"] != record["schedule"]["sha256"]:
            raise CheckFailed("the new run's schedule is not the study's (the first run changed meanwhile?)")
        per_guard = dict(record["budget"]["per_guard"])
        if guard_max_cost is not None:
            per_guard[name] = guard_max_cost
        record = write_record(study, {**record, "runs": [*record["runs"], run_entry(name, plan.manifest)],
                                      "budget": {**record["budget"], "per_guard": per_guard},
                                      "commands": [*record["commands"], command(argv)]})
        new = open_runs(study, record, held, [name])
        budget = record["budget"]["max_cost"] if max_cost is None else max_cost
        o = RunOptions(**{**vars(o), "max_cost": guard_max_cost})
        return _dispatch(study, record, new, {name: o}, folders, max_cost=budget, progress=progress,
                         handle_signals=handle_signals)


def edit(study_dir: str | Path, changes: Mapping[str, Any], reason: str, *, argv: Sequence[str] | None = None
         ) -> dict[str, Any]:
    """Change the study's question (a recorded edit, with its reason); the record as written."""
    with open_study(study_dir) as study, StudyLock(study), ExitStack() as held:
        record = read_record(study)
        require_intact(study, record)
        first = open_runs(study, record, held, [record["runs"][0]["label"]])
        manifest = read_manifest(next(iter(first.values())))
        from guardeval.run.planning import load_run_cohort

        cohort = load_run_cohort(next(iter(first.values())), manifest)
        new = edited(record, [(c.name, c.role) for c in cohort.conditions], changes, reason)
        return write_record(study, {**new, "commands": [*new["commands"], command(argv)]})

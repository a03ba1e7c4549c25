"""Estimate a run, compare two, load the call table (as records, or a pandas/polars frame)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardeval.api.types import CallRecord, Comparison, Difference, Estimate
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.run import Run

if TYPE_CHECKING:
    from guardeval.estimators.types import Report
    from guardeval.run.integrity.verify_state import Verified
    from guardeval.view.calls import CallRow


def estimate(run: str | Path | RunFolder | Run, *, baseline: str | None = None, placebo: str | None = None,
             family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0, failure_rule: str = "drop",
             missing: str = "exclude", allow_partial: bool = False, allow_unpublishable: bool = False,
             verify: bool = True, allow_skipped: bool = False, write: bool = True, margin: float | None = None,
             alpha: float = 0.05, row_limits: RowLimits = DEFAULT_ROW_LIMITS, out: str | Path | None = None) -> Estimate:
    """Paired effects with cluster-bootstrap intervals (`guardeval estimate RUN`). The run is
    verified first (CheckFailed when it does not hold; `verify=False` skips that, and the report
    says so). `margin`: the equivalence margin (`--margin`); `alpha`: the level of every verdict
    (`--alpha`, Holm within each stated family). With `write`, report.json, report.md,
    effects.png and report.html go into the run, or into `out` (`--out DIR`: a folder of their
    own, made if needed, never a run's), which is how a run on a read-only mount is estimated; a
    run folder that cannot be written without `out` is refused before any work (InputError)."""
    from guardeval.estimators.runs import estimate_run
    from guardeval.estimators.verdicts.equivalence import DEFAULT_MARGIN
    from guardeval.run.folder.folder import NotWritable
    from guardeval.view.files import report_folder

    out_dir = report_folder(out) if write and out is not None else None
    with Run.using(run) as r:
        if write and out_dir is None and not r.folder.writable():
            raise NotWritable(r.path, "report.json, report.md, effects.png and report.html")
        report = estimate_run(r, baseline=baseline, placebo=placebo, family=family, n_boot=n_boot, seed=seed,
                              margin=DEFAULT_MARGIN if margin is None else margin, alpha=alpha,
                              failure_rule=failure_rule, missing=missing, allow_partial=allow_partial,
                              allow_unpublishable=allow_unpublishable, write=write, verify=verify,
                              allow_skipped=allow_skipped, row_limits=row_limits, out=out_dir)
        if write:
            from guardeval.view.html import write_report_html

            write_report_html(r, report, just_estimated=True,
                              out=None if out_dir is None else out_dir / "report.html")
        return estimate_record(report, r.path)


def estimate_record(report: Report, run_dir: Path | None = None) -> Estimate:
    """The typed record of an estimate report (report.json's shape); its effects are the effects
    table's rows (`estimators.report.rows`), which every format of the table renders."""
    from guardeval.estimators.report.rows import effect_rows

    effects = effect_rows(report)
    source = report.get("source") or {}
    return Estimate(run_dir=run_dir, baseline=report["baseline"], placebo=report["placebo"],
                    failure_rule=report["failure_rule"], n_calls=report["n_calls"], n_bases=report["n_bases"],
                    complete=report["complete"], publishable=report["publishable"],
                    verified=bool(source.get("verified")), quarantined=int(report["quarantine"]["count"]),
                    block_rate=dict(report["block_rate"]), effects=effects, notes=list(report["notes"]),
                    report=report.copy(), excluded=report.get("excluded"))


def compare(*runs: str | Path | RunFolder | Run, labels: Sequence[str] | None = None, baseline: str | None = None,
            placebo: str | None = None, family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
            failure_rule: str = "drop", missing: str = "exclude", margin: float | None = None,
            alpha: float = 0.05, allow_partial: bool = False, allow_unpublishable: bool = False, verify: bool = True,
            allow_skipped: bool = False, out: str | Path | None = None, write: bool = True,
            row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> Comparison:
    """Two or more runs of one schedule (replicates on other guards): each run's effects, the
    paired differences, Holm over the family (`guardeval compare RUN_A RUN_B ...`). Each run is
    verified first. `conditions` is the first pair (B − A); `result` holds every pair, the
    leaderboard and the ranking checks. With `write`, compare.md, compare.html and compare.png go
    into `out` (default: a folder of its own beside the first run, `compare-A-B`; never a run's).
    A run given twice is refused (InputError)."""
    from guardeval.estimators.compare.compare import compare_inputs
    from guardeval.estimators.runs import (
        check_distinct,
        compare_input_from_run,
        distinguish,
        first_schedule_difference,
    )
    from guardeval.estimators.verdicts.equivalence import DEFAULT_MARGIN
    from guardeval.view.files import compare_folder, make_folder

    if len(runs) < 2:
        raise InputError(f"compare needs at least two runs, got {len(runs)}")
    with ExitStack() as held:   # each run opened once and closed on the way out (a Run given stays open)
        opened = [held.enter_context(Run.using(r)) for r in runs]
        folders = [r.folder for r in opened]
        check_distinct(folders)
        for r in folders[1:]:
            line = first_schedule_difference(folders[0], r, row_limits)
            if line is not None:
                raise InputError(f"schedule.jsonl of {folders[0].path} and {r.path} differ from line {line}: not runs of "
                                 "one schedule", path=r.file("schedule.jsonl"), line=line)
        out_dir = compare_folder(out, [f.path for f in folders])
        if labels is not None and len(labels) != len(folders):
            raise InputError(f"{len(labels)} labels for {len(folders)} runs", field="labels")
        inputs = [compare_input_from_run(r, labels[i] if labels else None, verify=verify, allow_skipped=allow_skipped,
                                         row_limits=row_limits) for i, r in enumerate(opened)]
        distinguish(inputs)
        result: Any = compare_inputs(inputs, baseline=baseline, placebo=placebo, family=family, n_boot=n_boot, seed=seed,
                                     failure_rule=failure_rule, missing=missing,
                                     margin=DEFAULT_MARGIN if margin is None else margin, alpha=alpha,
                                     allow_partial=allow_partial,
                                     allow_unpublishable=allow_unpublishable)
        result["run_a"], result["run_b"] = inputs[0].source, inputs[1].source
        written: list[Path] = []
        if write:
            from guardeval.view.compare import write_compare

            make_folder(out_dir)    # made once the comparison holds (`--out DIR` as the CLI)
            written = list(write_compare(result, out_dir))
        rows = [difference_record(r) for r in result["conditions"]]
        checks: list[Verified] = [{"checked": i.source["verified"], "skipped": i.source["verify_skipped"]} for i in inputs]
        return Comparison(runs=[f.path for f in folders], labels=[i.label for i in inputs], baseline=result["baseline"],
                          failure_rule=result["failure_rule"], publishable=result["publishable"],
                          complete=result["complete"], ranking_changed=bool(result["ranking_changed"]), conditions=rows,
                          written=written, checks=checks, result=result,
                          excluded={i["label"]: i["excluded"] for i in result["inputs"] if "excluded" in i})


def difference_record(r: Any) -> Difference:
    """The typed record of one pair row of a comparison (compare.json's `conditions`): B − A of Δ
    and of the placebo-corrected effect, each with its decision; the row the pair tables show."""
    return Difference.of(r)


def calls(run: str | Path | RunFolder | Run) -> list[CallRecord]:
    """One record per scheduled call, in schedule order, joined across the run folder (the
    columns of `guardeval export`)."""
    from guardeval.view.calls import load_calls

    with Run.using(run) as opened:
        return [_call_record(r) for r in load_calls(opened.folder).rows]


def _call_record(r: CallRow) -> CallRecord:
    """The export's columns of a call row (`view.calls.EXPORT_COLUMNS`), field by field."""
    return CallRecord(call_id=r["call_id"], base_id=r["base_id"], interaction_id=r["interaction_id"],
                      domain=r["domain"], condition=r["condition"], repetition=r["repetition"], label=r["label"],
                      tool=r["tool"], decision=r["decision"], score=r["score"], status=r["status"],
                      quarantine_reason=r["quarantine_reason"], attempts=r["attempts"], latency_s=r["latency_s"],
                      cost=r["cost"], provider=r["provider"], finish_reason=r["finish_reason"],
                      retry_round=r["retry_round"])


FRAME_LIBRARIES = ("pandas", "polars")


def calls_frame(run: str | Path, library: str = "pandas") -> Any:
    """The call table as a pandas or polars DataFrame. Neither is a dependency of guardeval:
    InputError naming the package to install when it is missing."""
    if library not in FRAME_LIBRARIES:
        raise InputError(f"unknown library {library!r} (one of {', '.join(FRAME_LIBRARIES)})", field="library")
    try:
        lib = __import__(library)
    except ImportError:
        raise InputError(f"calls_frame(library={library!r}) needs {library}, which guardeval does not install: "
                         f"pip install {library}", field="library") from None
    from guardeval.view.calls import EXPORT_COLUMNS

    rows = [r.to_dict() for r in calls(run)]
    if library == "pandas":
        return lib.DataFrame.from_records(rows, columns=list(EXPORT_COLUMNS))
    return lib.from_dicts(rows, infer_schema_length=None)   # every row read for the column types

"""Estimate a run folder: verify what the estimate relies on, read it through the run store's
reader, estimate, write the report files into the run folder. Used by `guardeval estimate RUN`,
`guardeval compare` and `demo`.

Each function takes a `Run` its caller opened (`with Run.using(...)`) and reads it; none opens a
run, so the estimate path opens its folder once (issue 49 §3)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import CheckFailed, InputError
from guardeval.estimators.core import Incomplete, estimate, validated
from guardeval.estimators.table import ValidatedRows
from guardeval.estimators.types import Report
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import REPORT_JSON, SCHEDULE
from guardeval.run.integrity.fingerprint import run_fingerprint
from guardeval.run.integrity.verify_state import Verified
from guardeval.run.run import Run


def verified(run: Run, *, verify: bool = True, allow_skipped: bool = False,
             row_limits: RowLimits = DEFAULT_ROW_LIMITS, doing: str = "estimate") -> Verified:
    """Check a run before it is estimated: every decision against its raw line and its
    re-derivation, the chain, the manifest's pins (`guardeval verify`). CheckFailed naming the
    first file and line that fails, or the check that could not be done; with `verify=False`,
    nothing is checked. Returns what the report records: `{"checked": bool, "skipped": [...]}`."""
    if not verify:
        return {"checked": False, "skipped": []}
    from guardeval.run.integrity.verify import verify_run

    result = verify_run(run.folder, allow_skipped=allow_skipped, row_limits=row_limits)
    if not result["ok"]:
        if result["problems"]:
            first: Mapping[str, Any] = result["problems"][0]
            where = first["file"] + (f":{first['line']}" if first.get("line") else "")
            more = len(result["problems"]) - 1
            what = f"{where}: {first['message']}" + (f" (and {more} more)" if more else "")
        else:
            first = result["skipped"][0]
            # A reason may already name its check and the option (the callable's): said once.
            reason = str(first["reason"])
            what = reason if reason.startswith(first["check"]) else f"{first['check']} could not be done: {reason}"
            if "--allow-skipped" not in reason:
                what += " (--allow-skipped accepts that)"
        raise CheckFailed(f"{run.path}: the run does not verify, so guardeval does not {doing} it: {what}. "
                          f"`guardeval verify {run.path}` lists every problem; --no-verify does it anyway")
    return {"checked": True, "skipped": result["skipped"]}


def load_run(run: Run, row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> tuple[RunFolder, Any, ValidatedRows]:
    """(run folder, RunTable, validated rows). A bad row names its line in schedule.jsonl."""
    from guardeval.run.runtable import load_run_table  # lead-owned run-store reader

    folder = run.folder
    table = load_run_table(run, row_limits)
    rows = validated(table.rows, path=folder.file(SCHEDULE), lines=range(1, len(table.rows) + 1))
    return folder, table, rows


def estimate_run(run: Run, *, baseline: str | None = None, placebo: str | None = None,
                 family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
                 failure_rule: str = "drop", missing: str = "exclude", allow_partial: bool = False,
                 allow_unpublishable: bool = False, write: bool = True, verify: bool = True,
                 allow_skipped: bool = False, row_limits: RowLimits = DEFAULT_ROW_LIMITS,
                 margin: float = 0.05, alpha: float = 0.05, out: Path | None = None) -> Report:
    """The report of a run (see `estimate`), from a run that verifies (see `verified`); with
    `write`, report.json, report.md and effects.png go into the run folder (into `out`, a
    folder of their own, when given)."""
    verification = verified(run, verify=verify, allow_skipped=allow_skipped, row_limits=row_limits)
    folder, table, rows = load_run(run, row_limits)
    try:
        report = estimate(rows, baseline=baseline or table.baseline or "original", placebo=placebo, family=family,
                          n_boot=n_boot, seed=seed, failure_rule=failure_rule, missing=missing, roles=table.roles,
                          n_scheduled=table.n_scheduled, complete=table.complete, allow_partial=allow_partial,
                          allow_unpublishable=allow_unpublishable, margin=margin, alpha=alpha,
                          families=table.families)
    except Incomplete as exc:
        # A run folder can also be finished: say how, before the way around it.
        raise Incomplete(exc.missing, exc.scheduled, f"finish it with: guardeval resume {folder}; or use "
                         "--allow-partial to estimate it as it is") from None
    m = table.manifest
    # What the report was made from and how: `guardeval report` checks the first against the run
    # as it is then, and makes the estimate again under the second to check the numbers.
    report["source"] = {"run": str(folder.path), "run_id": m.get("run_id"), "schedule_sha256": m.get("schedule_sha256"),
                        "manifest_sha256": m.get("sha256"), "fingerprint": run_fingerprint(folder, m).token,
                        "options": {"baseline": baseline, "placebo": placebo,
                                    "family": list(family) if family is not None else None, "n_boot": n_boot,
                                    "seed": seed, "failure_rule": failure_rule, "missing": missing,
                                    "allow_partial": allow_partial, "allow_unpublishable": allow_unpublishable,
                                    "margin": margin, "alpha": alpha},
                        "guard": {"name": (m.get("guard") or {}).get("name"), "model": (m.get("guard") or {}).get("model")},
                        "verified": verification["checked"], "verify_skipped": verification["skipped"]}
    if write:
        from guardeval.estimators.report.report import write_reports
        from guardeval.run.folder.answered import answered_by, run_title

        write_reports(report, folder if out is None else out, title=run_title(m, answered_by(folder)))
    return report


_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "baseline": (str, type(None)), "placebo": (str, type(None)), "family": (list, type(None)), "n_boot": (int,),
    "seed": (int,), "failure_rule": (str,), "missing": (str,), "allow_partial": (bool,), "allow_unpublishable": (bool,),
    "margin": (float,), "alpha": (float,)}


def recheck_report(run: Run, report: Mapping[str, Any], row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> None:
    """Is `report` (a run's report.json, as read) the estimate of this run as it is now? Its
    recorded fingerprint must be the run's, and the estimate made again under its recorded
    options must give the same numbers; CheckFailed otherwise. A report.json is a file anyone
    can edit: without this, `guardeval report` would show forged numbers under "verify passed"."""
    from guardeval.estimators.report.report import dumps_json
    from guardeval.run.folder.manifest import read_manifest

    folder = run.folder
    where = folder.file(REPORT_JSON)
    src = report.get("source")
    again = f"run `guardeval estimate {folder.path}` to make it again"
    if not isinstance(src, dict) or not isinstance(src.get("options"), dict) or "fingerprint" not in src:
        raise CheckFailed(f"{where}: records no fingerprint or options (made by an older guardeval, or edited): {again}")
    now = run_fingerprint(folder, read_manifest(folder)).token
    if src["fingerprint"] != now:
        raise CheckFailed(f"{where}: made from another state of this run (fingerprint {src['fingerprint']!s:.40}, "
                          f"the run's is now {now}): {again}")
    options = src["options"]
    if set(_OPTION_TYPES) - set(options) == {"alpha"}:
        raise CheckFailed(f"{where}: made by an older guardeval (no decision level recorded): {again}")
    if set(options) != set(_OPTION_TYPES) or any(type(options[k]) not in t for k, t in _OPTION_TYPES.items()) \
            or (options["family"] is not None and not all(type(c) is str for c in options["family"])):
        raise CheckFailed(f"{where}: its recorded options are damaged: {again}")
    try:
        fresh = estimate_run(run, write=False, verify=False, row_limits=row_limits, **options)
    except InputError as exc:
        raise CheckFailed(f"{where}: its recorded options do not apply to this run ({exc}): {again}") from None
    ours = {k: v for k, v in report.items() if k != "source"}
    theirs = {k: v for k, v in fresh.items() if k != "source"}
    if dumps_json(ours) != dumps_json(theirs):
        raise CheckFailed(f"{where}: its numbers are not the estimate of this run under its own options (edited?): "
                          f"{again}")


def first_schedule_difference(run_a: RunFolder, run_b: RunFolder, row_limits: RowLimits = DEFAULT_ROW_LIMITS
                              ) -> int | None:
    """The first line (1-based) at which the two runs' schedule.jsonl differ, None when they are
    the same; each line is read under the run's line cap (RunFolder), so a hostile file cannot
    exhaust memory."""
    from itertools import zip_longest

    lines_a, lines_b = run_a.lines(SCHEDULE), run_b.lines(SCHEDULE)
    for n, (a, b) in enumerate(zip_longest(lines_a, lines_b), start=1):
        if a is None or b is None or a[1] != b[1]:
            return n
    return None


def check_distinct(folders: Sequence[RunFolder]) -> None:
    """A run given twice to `compare` is refused (exit 2): every difference would be exactly 0,
    which says nothing about two guards."""
    for i, a in enumerate(folders):
        for b in folders[i + 1:]:
            try:
                same = os.path.samefile(a.path, b.path)
            except OSError:
                same = False
            if same:
                raise InputError(f"{a.path} and {b.path} are the same run: a run compared with itself differs by "
                                 "exactly 0 everywhere. Compare it with a replicate on another guard "
                                 "(guardeval replicate RUN --guard ...)")


def compare_input_from_run(run: Run, label: str | None, *, verify: bool = True, allow_skipped: bool = False,
                           row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> Any:
    """A run as an input of `compare`: verified first (see `verified`), labelled by the guard that
    answered it (`guardeval.run.folder.answered.run_name`: the config's `label`, else the
    simulator's profile, the model the provider reported or the python callable) unless `label`
    is given."""
    from guardeval.estimators.compare.compare import CompareInput
    from guardeval.estimators.compare.compare_types import InputSource
    from guardeval.run.folder.answered import answered_by, run_name

    verification = verified(run, verify=verify, allow_skipped=allow_skipped, row_limits=row_limits)
    folder, table, rows = load_run(run, row_limits)
    m = table.manifest
    guard = m.get("guard") or {}
    seen = answered_by(folder)
    name = label or (run_name(guard, seen) if isinstance(guard, dict) else folder.path.name)
    named_by = ("given" if label else "label" if isinstance(guard, dict) and guard.get("label")
                else "answered" if len(seen) == 1 else "name")
    source: InputSource = {"run": str(folder.path), "run_id": m.get("run_id"), "schedule_sha256": m.get("schedule_sha256"),
              "verified": verification["checked"], "verify_skipped": verification["skipped"],
              "guard": {"name": guard.get("name"), "model": guard.get("model"), "answered_by": seen,
                        "named_by": named_by}}
    return CompareInput(name, rows, table.roles, table.baseline, table.placebo, table.complete, source)


def distinguish(inputs: Sequence[Any]) -> None:
    """Runs named by the guard that answered them but sharing that name (one simulator profile
    behind several configs, one model behind several settings) are called by their configs' names
    instead, when those differ: the names their user gave them."""
    groups: dict[str, list[Any]] = {}
    for inp in inputs:
        guard = (inp.source or {}).get("guard") or {}
        if guard.get("named_by") == "answered":
            groups.setdefault(inp.label, []).append(inp)
    for group in groups.values():
        names = [str(i.source["guard"].get("name")) for i in group]
        if len(group) > 1 and len(set(names)) == len(names):
            for inp, config_name in zip(group, names):
                inp.label = config_name


def compare_input_from_table(path: str | Path, label: str | None,
                             row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> Any:
    """A JSONL decision table as an input of `compare`, labelled by its file name unless `label` is given."""
    from guardeval.canon import file_sha256
    from guardeval.estimators.compare.compare import CompareInput
    from guardeval.estimators.table import load_table

    p = Path(path)
    rows = load_table(p, row_limits)
    return CompareInput(label or p.name, rows, source={"table": str(p), "sha256": file_sha256(p)})

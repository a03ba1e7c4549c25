"""Estimate a run folder: read it through the run store's reader, estimate, write the report
files into the run folder. Used by `guardeval estimate RUN` and available to `demo`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.estimators.core import estimate, validated
from harness.estimators.table import ValidatedRows
from harness.estimators.types import Report


def run_dir(path: str | Path) -> Path:
    run = Path(path)
    if not (run / "manifest.json").is_file() or not (run / "schedule.jsonl").is_file():
        raise InputError("not a run folder (no manifest.json / schedule.jsonl)", path=run)
    return run


def load_run(path: str | Path) -> tuple[Path, Any, ValidatedRows]:
    """(run folder, RunTable, validated rows). A bad row names its line in schedule.jsonl."""
    from harness.run.runtable import load_run_table  # lead-owned run-store reader

    run = run_dir(path)
    table = load_run_table(run)
    rows = validated(table.rows, path=run / "schedule.jsonl", lines=range(1, len(table.rows) + 1))
    return run, table, rows


def estimate_run(path: str | Path, *, baseline: str | None = None, placebo: str | None = None,
                 family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
                 failure_rule: str = "drop", missing: str = "exclude", allow_partial: bool = False,
                 allow_unpublishable: bool = False, write: bool = True) -> Report:
    """The report of a run (see `estimate`); with `write`, report.json, report.md and
    effects.png go into the run folder."""
    run, table, rows = load_run(path)
    report = estimate(rows, baseline=baseline or table.baseline or "original", placebo=placebo, family=family,
                      n_boot=n_boot, seed=seed, failure_rule=failure_rule, missing=missing, roles=table.roles,
                      n_scheduled=table.n_scheduled, complete=table.complete, allow_partial=allow_partial,
                      allow_unpublishable=allow_unpublishable)
    m = table.manifest
    report["source"] = {"run": str(run), "run_id": m.get("run_id"), "schedule_sha256": m.get("schedule_sha256"),
                        "manifest_sha256": m.get("sha256")}
    if write:
        from harness.estimators.report import write_reports

        write_reports(report, run)
    return report

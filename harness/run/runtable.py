"""A run folder as an analysis table: one row per scheduled call (docs/design.md §10 inputs).

Calls with no decision yet appear with status `missing`, so the estimator can see coverage
and refuse an incomplete run. Calls answered under a generation id that another call also
received are quarantined here as `replay_mismatch` (a check across calls: `harness.run.replay`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits, load_cohort
from harness.errors import CheckFailed
from harness.run.decide import REPLAY_MISMATCH
from harness.run.replay import generation_replays
from harness.run.store import DECISIONS, SCHEDULE, iter_jsonl, read_manifest

# The fields each file's lines must carry, with their types: a damaged line is named, not a KeyError.
_SCHEDULE_FIELDS: dict[str, tuple[type, ...]] = {"call_id": (str,), "base_id": (str,), "interaction_id": (str,), "domain": (str,),
                    "condition": (str,), "repetition": (int,)}
_DECISION_FIELDS: dict[str, tuple[type, ...]] = {"call_id": (str,), "status": (str,), "decision": (int, type(None)),
                    "components": (dict, type(None)), "quarantine_reason": (str, type(None))}


def _checked(rec: dict[str, Any], fields: dict[str, tuple[type, ...]], path: Path, lineno: int) -> dict[str, Any]:
    for name, types in fields.items():
        if name not in rec or not isinstance(rec[name], types) or isinstance(rec[name], bool):
            raise CheckFailed(f"{path}: line {lineno}: missing or malformed field '{name}' (the run is damaged; "
                              f"`guardeval verify {path.parent}` lists every problem)")
    return rec


@dataclass
class RunTable:
    rows: list[dict[str, Any]]
    n_scheduled: int
    complete: bool
    roles: dict[str, str]
    baseline: str
    placebo: str | None
    manifest: dict[str, Any]


def load_run_table(run_dir: str | Path, row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> RunTable:
    run = Path(run_dir)
    manifest = read_manifest(run)
    cohort = load_cohort(run / "cohort", limits=row_limits)
    labels = {r["base_id"]: r["label"] for r in cohort.instances}
    decisions: dict[str, dict[str, Any]] = {}
    for lineno, _, rec in iter_jsonl(run / DECISIONS):
        decisions[_checked(rec, _DECISION_FIELDS, run / DECISIONS, lineno)["call_id"]] = rec
    replayed = generation_replays(run)
    rows: list[dict[str, Any]] = []
    n = 0
    for lineno, _, s in iter_jsonl(run / SCHEDULE):
        _checked(s, _SCHEDULE_FIELDS, run / SCHEDULE, lineno)
        n += 1
        d = decisions.get(s["call_id"])
        rows.append({
            "call_id": s["call_id"], "base_id": s["base_id"], "interaction_id": s["interaction_id"],
            "domain": s["domain"], "condition": s["condition"], "repetition": s["repetition"],
            "label": labels.get(s["base_id"]),
            "decision": d["decision"] if d else None,
            "status": d["status"] if d else "missing",
            "components": d.get("components") if d else None,
            "quarantine_reason": _quarantine(d, replayed),
        })
    roles = {c.name: c.role for c in cohort.conditions}
    return RunTable(rows=rows, n_scheduled=n, complete=all(r["status"] != "missing" for r in rows), roles=roles,
                    baseline=cohort.baseline(), placebo=cohort.placebo(), manifest=manifest)


def _quarantine(d: dict[str, Any] | None, replayed: dict[str, str]) -> str | None:
    if d is None:
        return None
    if d.get("quarantine_reason") is None and d["call_id"] in replayed:
        return REPLAY_MISMATCH
    return d.get("quarantine_reason")

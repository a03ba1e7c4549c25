"""A run folder as an analysis table: one row per scheduled call (docs/design.md §10 inputs).

Calls with no decision yet appear with status `missing`, so the estimator can see coverage
and refuse an incomplete run. Calls answered under a generation id that another call also
received are quarantined here as `replay_mismatch` (a check across calls: `guardeval.run.integrity.replay`).
Each row also carries the base's tool (under the baseline condition), the guard's score,
`started`: the start time of the final attempt, the one its decision was derived from (read
from raw.jsonl, for the dispatch-order diagnostics), and `retry_round` (0, or the retry its
live decision came from).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import CheckFailed
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import DECISIONS, RAW, SCHEDULE
from guardeval.run.folder.lines import iter_jsonl
from guardeval.run.folder.manifest import RunManifest, load_cohort_copy, read_manifest, run_row_limits
from guardeval.run.integrity.replay import generation_replays, quarantine_reason
from guardeval.run.schedule import ScheduledCall

if TYPE_CHECKING:
    from guardeval.run.run import Run

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


class RunRow(ScheduledCall):
    """A scheduled call as a decision-table row (estimators/table.py validates it): the schedule's
    fields, the cohort's label and tool, and the call's live decision (status "missing" without one)."""

    label: int | None
    tool: str | None
    decision: int | None
    status: str
    score: float | None
    started: str | None             # the final attempt's start (ISO 8601)
    components: dict[str, bool | int | float | None] | None
    quarantine_reason: str | None
    retry_round: int


@dataclass
class RunTable:
    rows: list[RunRow]
    n_scheduled: int
    complete: bool
    roles: dict[str, str]
    baseline: str
    placebo: str | None
    manifest: RunManifest
    # {condition: family} from the cohort's record (empty: the cohort names no families)
    families: dict[str, str] = field(default_factory=dict)


# The last fields of a raw line in the writer's shape (canonical JSON, keys sorted): seq and
# started are scalars, then status, then the usage object, which ends the line.
_TAIL = re.compile(rb',"seq":([0-9]+),"started":"([^"\\]{1,64})","status":(?:null|-?[0-9]+),"usage":')


def _tail_fields(buf: Any, start: int, end: int) -> tuple[int, str] | None:
    """(seq, started) from the end of the raw line buf[start:end] without parsing its request.

    Inside a JSON string every quote is escaped, so the pattern can only be keys; it is the
    top-level one when the rest of the line, from its usage object on, is exactly one JSON
    object (a look-alike nested inside usage would leave unbalanced braces). None: parse the line.
    """
    at = buf.rfind(b',"started":"', start, end)
    if at < 0:
        return None
    head = buf.rfind(b',"seq":', start, at)
    m = _TAIL.match(buf, head, end) if head >= 0 else None
    if m is None or buf[end - 1] != 0x7D:  # "}"
        return None
    try:
        usage = orjson.loads(buf[m.end():end - 1])
    except orjson.JSONDecodeError:
        return None
    if type(usage) is not dict:
        return None
    return int(m[1]), m[2].decode("ascii", "replace")


def final_attempt_starts(folder: RunFolder, wanted: set[int], window: int = 64 << 20) -> dict[int, str]:
    """seq -> `started` of the raw lines whose seq is in `wanted`. Only the last bytes of each
    line are read (a multi-GB log is mapped a window at a time); a torn last line is left out."""
    out: dict[int, str] = {}
    if not wanted:
        return out
    for _, buf, pos, nl, _ in folder.mapped_lines(RAW, window=window):
        got = _tail_fields(buf, pos, nl) or _parsed_fields(buf[pos:nl])
        if got is not None and got[0] in wanted:
            out[got[0]] = got[1]
    return out


def _parsed_fields(line: bytes) -> tuple[int, str] | None:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or type(rec.get("seq")) is not int or not isinstance(rec.get("started"), str):
        return None
    return rec["seq"], rec["started"]


def _retry_round(d: dict[str, Any] | None) -> int:
    rnd = d.get("retry_round") if d else None
    return rnd if type(rnd) is int and rnd > 0 else 0


def load_run_table(run: Run | str | Path | RunFolder, row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> RunTable:
    """The run as estimator rows; a Run or RunFolder given is read as it is (left open)."""
    from guardeval.run.run import Run

    with Run.using(run) as r:
        return _run_table(r.folder, row_limits)


def _run_table(folder: RunFolder, row_limits: RowLimits) -> RunTable:
    manifest = read_manifest(folder)
    pin = manifest.get("cohort", {}).get("sha256") if isinstance(manifest.get("cohort"), dict) else None
    cohort = load_cohort_copy(folder, run_row_limits(folder, manifest, row_limits), pin)
    baseline = cohort.baseline()
    labels: dict[str, int | None] = {}
    tools: dict[str, str] = {}
    for r in cohort.iter_instances():
        labels[r["base_id"]] = r["label"]
        if r["condition"] == baseline or r["base_id"] not in tools:
            tools[r["base_id"]] = r["tool"]
    decisions: dict[str, dict[str, Any]] = {}
    # The paths once: joining them per line cost more than the rest of the loop on a large run.
    dec_path, sched_path = folder.file(DECISIONS), folder.file(SCHEDULE)
    for lineno, _, rec in iter_jsonl(folder, DECISIONS):
        # A retried call's newer decision supersedes its earlier one (guardeval.run.folder.supersede;
        # `verify` checks the chain): the last decision of a call is its live one.
        decisions[_checked(rec, _DECISION_FIELDS, dec_path, lineno)["call_id"]] = rec
    replayed = generation_replays(folder)
    starts = final_attempt_starts(folder, {d["raw_seq"] for d in decisions.values()
                                              if type(d.get("raw_seq")) is int})
    rows: list[RunRow] = []
    n = 0
    for lineno, _, s in iter_jsonl(folder, SCHEDULE):
        _checked(s, _SCHEDULE_FIELDS, sched_path, lineno)
        n += 1
        d = decisions.get(s["call_id"])
        rows.append({
            "call_id": s["call_id"], "base_id": s["base_id"], "interaction_id": s["interaction_id"],
            "domain": s["domain"], "condition": s["condition"], "repetition": s["repetition"],
            "label": labels.get(s["base_id"]), "tool": tools.get(s["base_id"]),
            "decision": d["decision"] if d else None,
            "status": d["status"] if d else "missing",
            "score": d.get("score") if d else None,
            "started": starts.get(d["raw_seq"]) if d and type(d.get("raw_seq")) is int else None,
            "components": d.get("components") if d else None,
            "quarantine_reason": quarantine_reason(d, replayed),
            # 0: the call's first decision; k: its k-th retry (`resume --retry-failed`), a later measurement
            "retry_round": _retry_round(d),
        })
    roles = {c.name: c.role for c in cohort.conditions}
    return RunTable(rows=rows, n_scheduled=n, complete=all(r["status"] != "missing" for r in rows), roles=roles,
                    baseline=baseline, placebo=cohort.placebo(), manifest=manifest, families=cohort.families())

"""One row per scheduled call, joined across the run folder: schedule, cohort (label, tool),
decision and attempts. What `export`, `show` and the report's call browser read.

Each file is read once, as a stream. Per call only the schedule row, the decision's scalar
fields and a summary of its attempts are kept (count, spend, the final attempt's head fields,
where its lines are in raw.jsonl); request bodies and responses are read back by offset for
the few calls that are shown (`read_attempts`).
"""

from __future__ import annotations

import math
import mmap
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NotRequired, get_args

from guardeval.canon import sha256_hex
from guardeval.errors import InputError
from guardeval.run.folder.folder import LineTooLong, RunFolder
from guardeval.run.folder.layout import DECISIONS, RAW, SCHEDULE, STIMULI
from guardeval.run.folder.lines import iter_jsonl, iter_lines, parse_line, raw_head
from guardeval.run.folder.manifest import RunManifest, load_cohort_copy, read_manifest, run_row_limits
from guardeval.run.folder.spend import reported_cost
from guardeval.run.integrity.replay import generation_replays, quarantine_reason
from guardeval.run.schedule import ScheduledCall

if TYPE_CHECKING:
    from guardeval.run.run import Run

# The export frame (docs/how-to/export.md); `cost` is the call's spend over all its attempts,
# `latency_s`, `provider` and `finish_reason` are those of its final attempt; `retry_round` is 0,
# or the retry (`resume --retry-failed`) whose decision the row carries.
ExportColumn = Literal["call_id", "base_id", "interaction_id", "domain", "condition", "repetition", "label", "tool",
                       "decision", "score", "status", "quarantine_reason", "attempts", "latency_s", "cost",
                       "provider", "finish_reason", "retry_round"]
EXPORT_COLUMNS: tuple[ExportColumn, ...] = get_args(ExportColumn)   # in that order
CALL_ID = re.compile(r"[0-9a-f]{32}")
MIN_PREFIX = 1
CALL_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},32}}")


class CallRow(ScheduledCall):
    """One scheduled call joined across the run folder (`load_calls`): the export's columns and
    what the call browser and `show` need beyond them. Read from the run's own logs."""

    label: int | None
    tool: str | None
    decision: int | None
    score: float | None
    status: str                     # a decision status, or "missing"
    quarantine_reason: str | None
    attempts: int
    latency_s: float | None
    cost: float | None
    provider: str | None
    finish_reason: str | None
    retry_round: int
    index: int | None
    instance_sha256: str | None
    components: dict[str, bool | int | float | None] | None
    detail: str | None
    raw_seq: int | None
    raw_line_sha256: str | None
    error_class: str | None
    flip: NotRequired[bool | None]  # set by `mark_flips`


@dataclass
class AttemptSummary:
    n: int = 0
    cost: float | None = None                     # sum of valid costs; None when none was reported
    last: dict[str, Any] = field(default_factory=dict)   # head fields of the latest final attempt (else latest)
    where: list[tuple[int, int]] = field(default_factory=list)  # (offset, length) of each line


@dataclass
class RunCalls:
    """A run folder as call rows, in schedule order."""

    run: Path
    folder: RunFolder               # open: `read_attempts` reads the raw lines of the calls shown
    manifest: RunManifest
    conditions: list[str]
    roles: dict[str, str]
    baseline: str
    rows: list[CallRow]
    attempts: dict[str, AttemptSummary]
    n_raw: int
    spend: float | None
    first_started: str | None
    last_finished: str | None

    def row(self, call_id: str) -> CallRow | None:
        return next((r for r in self.rows if r["call_id"] == call_id), None)


def scan_attempts(folder: RunFolder) -> tuple[dict[str, AttemptSummary], int, str | None, str | None]:
    """Per call: attempts, spend, final head fields, line positions; also the number of raw
    lines and the first start / last finish time in the log."""
    out: dict[str, AttemptSummary] = {}
    n, first, last = 0, None, None
    path = folder.file(RAW)
    offset = 0
    for lineno, line in iter_lines(folder, RAW):
        parts = raw_head(line, 0, len(line) - 1)
        if parts is None:
            rec = parse_line(line[:-1], path, lineno)
            parts = ({k: v for k, v in rec.items() if k != "request"}, rec.get("usage") or {})
        head, usage = parts
        cid = head.get("call_id")
        if isinstance(cid, str):
            s = out.get(cid)
            if s is None:
                s = out[cid] = AttemptSummary()
            s.n += 1
            cost = reported_cost(usage)       # with a BYOK call's upstream charge
            if cost is not None:
                s.cost = (s.cost or 0.0) + cost
            # The final attempt, its decision's; a retry cut short (guardeval.run.folder.supersede) left
            # attempts after it that no decision is derived from.
            if head.get("final") is True or s.last.get("final") is not True:
                s.last = head
            s.where.append((offset, len(line)))
        n += 1
        if lineno == 1:     # `started` comes after the request: parse the first line whole
            first = parse_line(line[:-1], path, lineno).get("started")
        if isinstance(head.get("finished"), str):
            last = head["finished"]
        offset += len(line)
    return out, n, first, last


def _decisions(folder: RunFolder) -> dict[str, dict[str, Any]]:
    """Each call's live decision: a retry's supersedes the earlier (guardeval.run.folder.supersede), and
    comes later in the file."""
    out: dict[str, dict[str, Any]] = {}
    for _, _, rec in iter_jsonl(folder, DECISIONS):
        cid = rec.get("call_id")
        if isinstance(cid, str):
            out[cid] = rec
    return out


def load_calls(run: RunFolder | Run) -> RunCalls:
    """The call rows of a run its caller opened (`with Run.using(...)`): the rows read the
    folder as they are used, so it stays open for as long as they are."""
    folder = run if isinstance(run, RunFolder) else run.folder
    if not folder.has(SCHEDULE):
        raise InputError("not a run folder (no schedule.jsonl)", path=folder.path)
    manifest = read_manifest(folder)
    cohort = load_cohort_copy(folder, run_row_limits(folder, manifest))
    try:
        cells = {(r["base_id"], r["condition"]): (r.get("label"), r.get("tool")) for r in cohort.iter_instances()}
    finally:
        cohort.close()
    decisions = _decisions(folder)
    replayed = generation_replays(folder)   # quarantined as `estimate` counts them
    attempts, n_raw, first, last = scan_attempts(folder)
    rows: list[CallRow] = []
    for _, _, s in iter_jsonl(folder, SCHEDULE):
        cid = s["call_id"]
        d = decisions.get(cid) or {}
        a = attempts.get(cid)
        label, tool = cells.get((s["base_id"], s["condition"]), (None, None))
        final = a.last if a else {}
        rows.append({
            "call_id": cid, "base_id": s["base_id"], "interaction_id": s["interaction_id"], "domain": s["domain"],
            "condition": s["condition"], "repetition": s["repetition"], "label": label, "tool": tool,
            "decision": d.get("decision"), "score": d.get("score"), "status": d.get("status", "missing"),
            "quarantine_reason": quarantine_reason(d, replayed), "attempts": a.n if a else 0,
            "latency_s": final.get("latency_s"), "cost": a.cost if a else None, "provider": final.get("provider"),
            "finish_reason": final.get("finish_reason"),
            "retry_round": rnd if type(rnd := d.get("retry_round")) is int and rnd > 0 else 0,
            # beyond the export frame: what the call browser and `show` need
            "index": s.get("index"), "instance_sha256": s.get("instance_sha256"),
            "components": d.get("components"), "detail": d.get("detail"), "raw_seq": d.get("raw_seq"),
            "raw_line_sha256": d.get("raw_line_sha256"), "error_class": final.get("error_class"),
        })
    conditions = [c.name for c in cohort.conditions]
    roles = {c.name: c.role for c in cohort.conditions}
    baseline = cohort.baseline()
    mark_flips(rows, baseline)
    costs = [a.cost for a in attempts.values() if a.cost is not None]
    return RunCalls(run=folder.path, folder=folder, manifest=manifest, conditions=conditions, roles=roles,
                    baseline=baseline, rows=rows, attempts=attempts, n_raw=n_raw, spend=math.fsum(costs) if costs else None,
                    first_started=first, last_finished=last)


def counted_decision(row: CallRow) -> int | None:
    """The decision the estimators count under the drop rule (None: failed, quarantined, missing)."""
    if row["quarantine_reason"] is not None or row["status"] != "ok":
        return None
    return row["decision"]


def mark_flips(rows: list[CallRow], baseline: str) -> None:
    """`flip`: whether a call's decision differs from the baseline's in the same base and
    repetition (the same-round flip of docs/estimators.md); None when either is not counted
    and for the baseline's own calls."""
    base_dec = {(r["base_id"], r["repetition"]): counted_decision(r) for r in rows if r["condition"] == baseline}
    for r in rows:
        if r["condition"] == baseline:
            r["flip"] = None
            continue
        mine, theirs = counted_decision(r), base_dec.get((r["base_id"], r["repetition"]))
        r["flip"] = None if mine is None or theirs is None else mine != theirs


def read_attempts(folder: RunFolder, where: Iterable[tuple[int, int]]) -> list[dict[str, Any]]:
    """Full raw records at these (offset, length) positions (lines the scan read whole, so
    within the run's `line_cap`), each with `line_sha256` added."""
    out: list[dict[str, Any]] = []
    path = folder.file(RAW)
    for offset, length in where:
        body = folder.pread(RAW, length, offset)[:-1]
        rec = parse_line(body, path, 0)
        rec["line_sha256"] = sha256_hex(body)
        out.append(rec)
    return out


def _lines_naming(folder: RunFolder, name: str, call_id: str) -> Iterator[tuple[int, int, bytes]]:
    """(offset, line number, line without newline) of every line whose bytes carry the key
    `"call_id":"<call_id>"`, found with memchr-speed searches of the mapped file. A quote
    inside a JSON string is escaped, so the pattern can only be a key; the caller still checks
    the parsed field. A line longer than the run's `line_cap` is refused (LineTooLong), not copied."""
    mapped = folder.mapped(name)
    if mapped is None:
        return
    needle = b'"call_id":"' + call_id.encode() + b'"'
    with mapped as mm:
        pos, counted, lines = 0, 0, 0
        while (hit := mm.find(needle, pos)) >= 0:
            start = mm.rfind(b"\n", 0, hit) + 1
            end = mm.find(b"\n", hit)
            if end < 0:
                return          # a torn last line is not a record
            lines += _count_newlines(mm, counted, start)
            counted = start
            if end - start > folder.line_cap:
                raise LineTooLong(folder.file(name), lines + 1, folder.line_cap)
            yield start, lines + 1, mm[start:end]
            pos = end + 1


def _count_newlines(mm: mmap.mmap, start: int, end: int, chunk: int = 64 << 20) -> int:
    return sum(mm[i:min(i + chunk, end)].count(b"\n") for i in range(start, end, chunk))


def resolve_call_id(folder: RunFolder, text: str, shown: int = 5) -> str:
    """The call id that `text` names: a whole id, or a unique prefix of it (the Calls table
    shows ten digits). An ambiguous or unknown prefix is exit 2, the ambiguous one with a few of
    the ids it matches."""
    if CALL_ID.fullmatch(text):
        return text
    prefix = text.lower()
    if not CALL_PREFIX.fullmatch(prefix):
        raise InputError(f"not a call id (32 hex digits, or a unique prefix of them): {text!r}",
                         field="CALL_ID")
    found: list[str] = []
    n = 0
    mm = folder.mapped(SCHEDULE)
    if mm is not None:
        pattern = re.compile(rb'"call_id":"(' + prefix.encode() + rb'[0-9a-f]*)"')
        with mm:
            for m in pattern.finditer(mm):
                n += 1
                if len(found) < shown:
                    found.append(m[1].decode())
    if n == 0:
        raise InputError(f"no call id in this run's schedule begins with {prefix}", path=folder.file(SCHEDULE))
    if n > 1:
        more = f", and {n - len(found)} more" if n > len(found) else ""
        raise InputError(f"{prefix} is the prefix of {n} call ids ({', '.join(found)}{more}): give more digits",
                         field="CALL_ID")
    return found[0]


def find_call(run: Run | str | Path | RunFolder, call_id: str) -> dict[str, Any]:
    """One call's whole story, read straight from the files (no full scan of a large run):
    its schedule row, cohort row, every attempt, its decisions. `call_id` may be a unique prefix."""
    from guardeval.run.run import Run

    with Run.using(run) as r:
        if not r.folder.has(SCHEDULE):
            raise InputError("not a run folder (no schedule.jsonl)", path=r.path)
        return _story(r.folder, resolve_call_id(r.folder, call_id))


def _story(folder: RunFolder, call_id: str) -> dict[str, Any]:
    # Every file the story reads is opened before the first is searched: one refused (a link, a
    # FIFO) is named whatever the call.
    for name in (RAW, STIMULI, DECISIONS):
        folder.has(name)
    sched = folder.file(SCHEDULE)
    schedule = next((parse_line(b, sched, n) for _, n, b in _lines_naming(folder, SCHEDULE, call_id)), None)
    if schedule is None or schedule.get("call_id") != call_id:
        raise InputError(f"no call {call_id} in this run's schedule", path=sched)
    attempts = []
    for _, lineno, body in _lines_naming(folder, RAW, call_id):
        rec = parse_line(body, folder.file(RAW), lineno)
        if rec.get("call_id") == call_id:
            rec["line_sha256"] = sha256_hex(body)
            rec["line"] = lineno
            attempts.append(rec)
    stimulus = None
    for _, lineno, body in _lines_naming(folder, STIMULI, call_id):
        rec = parse_line(body, folder.file(STIMULI), lineno)
        if rec.get("call_id") == call_id:
            stimulus = rec.get("request_sha256")
    decisions = []
    for _, lineno, body in _lines_naming(folder, DECISIONS, call_id):
        rec = parse_line(body, folder.file(DECISIONS), lineno)
        if rec.get("call_id") == call_id:
            rec["line"], rec["line_sha256"] = lineno, sha256_hex(body)
            decisions.append(rec)
    cohort = load_cohort_copy(folder, run_row_limits(folder, read_manifest(folder)))
    try:
        instance = cohort.instance(schedule["base_id"], schedule["condition"])
    except KeyError:
        instance = None
    finally:
        cohort.close()
    # The live decision is the last (a retry's supersedes the one before it); `decisions` holds
    # them all, oldest first.
    return {"schedule": schedule, "instance": instance, "stimulus_sha256": stimulus, "attempts": attempts,
            "decision": decisions[-1] if decisions else None, "decisions": decisions}

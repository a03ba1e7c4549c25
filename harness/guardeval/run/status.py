"""`guardeval status`: counts read from the run files (no lock needed: append-only files).

One streaming pass over each log, the raw log in a worker when it is large. Raw lines carry
the whole request body (several KB each); status needs only `outcome`, `final`, the
generation id and the usage (what the attempt cost) of each, which `raw_fields` reads without
parsing the body, and of a decision
only its call id, status and quarantine reason (`decision_fields`). Both fall back to a full
parse for any line not in the writer's shape, so the counts are exact; a line damaged only in
the middle (the fields status does not read) is not noticed here: `verify` is the check.
A 1,000,000-call run reports in seconds.
"""

from __future__ import annotations

from array import array
from typing import Any, TypedDict

import orjson

from guardeval.backends.base import valid_cost
from guardeval.run.folder import supersede
from guardeval.run.folder.answered import answered_by
from guardeval.run.folder.causes import Causes, FailureCause
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.head import head_problems
from guardeval.run.folder.layout import DECISIONS, EVENTS, RAW
from guardeval.run.folder.lines import iter_jsonl, iter_lines, iter_raw_fields
from guardeval.run.folder.manifest import read_manifest, run_config
from guardeval.run.folder.workers import halves
from guardeval.run.integrity.fingerprint import last_line, run_fingerprint

MAX_PROBLEMS = 50   # listed by status (verify lists them all, up to its own bound)


class LastStop(TypedDict):
    """The run's last `stop` event, as events.jsonl has it."""

    at: str | None
    reason: str | None
    fatal: str | None
    decided: int | None
    total: int | None


class RetrySession(TypedDict):
    """A `resume --retry-failed` session's start, as events.jsonl has it."""

    at: str | None
    statuses: list[str] | None
    calls: int | None


class RetriedCalls(TypedDict):
    calls: int                      # calls retried (each once in round 1)
    rounds: dict[str, int]          # superseding decisions by retry round
    sessions: list[RetrySession]


class RunStatusRecord(TypedDict):
    """`guardeval status --json` of one run (the API's `RunStatus` reads it)."""

    run_id: str
    run_dir: str
    guard: str
    model: str
    cohort: str
    parent_run: str | None
    n_calls: int
    decided: int
    pending: int
    complete: bool
    running: bool
    state: str
    statuses: dict[str, int]
    failure_causes: list[FailureCause]
    quarantined: int
    quarantine_by_reason: dict[str, int]
    generation_replays: int
    attempts: int
    retries: int
    spend_usd: float
    spend_simulated: bool
    last_stop: LastStop | None
    retried: RetriedCalls
    undecided_answers: int
    problems: list[str]
    fingerprint: str
    answered_by: dict[str, int]


def run_status(folder: RunFolder) -> RunStatusRecord:
    """`guardeval status` of a run its caller opened (`guardeval.run.Run.open`), left open."""
    manifest = read_manifest(folder)
    raw_counts = _RawCounts(folder)   # workers read the raw log while this reads decisions
    rounds: dict[int, int] = {}
    problems: list[str] = []
    causes = Causes()
    try:
        decided, statuses, quarantine = decision_counts(folder, rounds, problems, causes)
        attempts, spend, retries, replayed, finals = raw_counts.result()
    finally:
        raw_counts.close()
    last_stop: LastStop | None = None
    last_event = None
    sessions: list[RetrySession] = []
    for _, _, ev in iter_jsonl(folder, EVENTS):
        kind = ev.get("event")
        if kind == "retry":
            sessions.append({"at": ev.get("at"), "statuses": ev.get("statuses"), "calls": ev.get("calls")})
        # A session is its start and its stop; the `note`s a session writes in between say
        # nothing about whether it ended.
        if kind in ("start", "stop"):
            last_event = kind
        if kind == "stop":
            last_stop = {"at": ev.get("at"), "reason": ev.get("reason"), "fatal": ev.get("fatal"),
                         "decided": ev.get("decided"), "total": ev.get("total")}
    n = manifest["n_calls"]
    fp = run_fingerprint(folder, manifest)
    problems[:0] = [f"{RAW}: {p}" for p in head_problems(folder, fp.n_raw, fp.raw_head,
                                                          _last_decision_raw_seq(folder))]
    running = folder.held_by_another()
    # A damaged run is not complete, whatever its counts say: one verdict with `verify`.
    complete = len(decided) >= n and not problems
    return {
        "run_id": manifest["run_id"], "run_dir": str(folder.path), "guard": manifest["guard"]["name"],
        "model": manifest["guard"]["model"], "cohort": manifest["cohort"]["name"],
        "parent_run": parent.get("run_id") if (parent := manifest.get("parent_run")) else None,
        "n_calls": n, "decided": len(decided), "pending": n - len(decided), "complete": complete,
        "running": running, "state": _state(running, complete, last_event, last_stop, bool(problems)),
        "statuses": statuses,
        # Why the failed calls failed: [{status, cause, calls, example}] (guardeval.run.folder.causes).
        "failure_causes": causes.result(),
        "quarantined": sum(quarantine.values()), "quarantine_by_reason": quarantine,
        # Calls whose answer shares a generation id with another call's (guardeval.run.integrity.replay):
        # quarantined by `estimate` as replay_mismatch, not counted in `quarantined` above.
        "generation_replays": replayed,
        "attempts": attempts, "retries": retries, "spend_usd": round(spend, 6),
        "spend_simulated": run_config(folder, manifest).is_simulated, "last_stop": last_stop,
        # `resume --retry-failed`: calls retried (each once in round 1), superseding decisions by
        # round, and each retry session's start (events.jsonl).
        "retried": {"calls": rounds.get(1, 0), "rounds": {str(k): v for k, v in sorted(rounds.items())},
                    "sessions": sessions},
        # Final answers in the log without a decision line: `resume` re-derives them.
        "undecided_answers": len(finals - decided),
        "problems": problems, "fingerprint": fp.token,
        # Which guard answered (the simulator's profile, the reported model, the callable): identity -> answers.
        "answered_by": answered_by(folder),
    }


def decision_counts(folder: RunFolder, rounds: dict[int, int] | None = None, problems: list[str] | None = None,
                    causes: Causes | None = None) -> tuple[set[str], dict[str, int], dict[str, int]]:
    """(distinct decided call ids, live decisions by status, quarantined by reason) of the whole
    run. A retried call counts once, at its live decision (`supersede.LiveCounts`); a line that
    breaks the retry chain (a call decided twice, a supersession of nothing) is not counted and
    goes into `problems`, when given. `rounds`, when given, gets the superseding decisions by
    retry round; `causes`, when given, every counted line (the failed calls' causes)."""
    live = supersede.LiveCounts()
    decided: set[str] = set()
    path = folder.file(DECISIONS)
    for lineno, line in iter_lines(folder, DECISIONS):
        cid, status, reason, sup, rnd = supersede.decision_line(line, path, lineno)
        problem = live.add(line, cid, status, reason, sup, cid in decided)
        if problem is not None:
            if problems is not None and len(problems) < MAX_PROBLEMS:
                problems.append(f"{DECISIONS} line {lineno}: {problem}")
            continue
        decided.add(cid)
        if causes is not None:
            causes.add(line, cid, status)
        if sup is not None and rounds is not None:
            rounds[rnd] = rounds.get(rnd, 0) + 1
    return decided, live.statuses, live.quarantine


def _state(running: bool, complete: bool, last_event: str | None, last_stop: LastStop | None,
           damaged: bool = False) -> str:
    """One word for where the run stands: running, damaged, complete, stopped, interrupted or
    not_started."""
    if running:
        return "running"          # another process holds the run's lock now
    if damaged:
        return "damaged"          # its files disagree (`problems`); `verify` names every one
    if complete:
        return "complete"
    if last_event == "start":
        return "interrupted"      # a session started and never wrote its stop: killed or crashed
    return "stopped" if last_stop is not None else "not_started"



_Part = tuple[int, int, array, dict[str, set[str]], set[str]]


def _raw_counts(folder: RunFolder, start: int = 0, end: int | None = None) -> _Part:
    """(attempts, retries, what each attempt cost in order, generation id -> the calls whose
    final answer carries it, the calls with a final line) over the complete lines of raw.jsonl
    (of bytes [start, end))."""
    attempts, retries, costs = 0, 0, array("d")
    generations: dict[str, set[str]] = {}
    finals: set[str] = set()
    for _, _, _, f in iter_raw_fields(folder, start, end):
        attempts += 1
        if f.final is True:
            finals.add(str(f.call_id))
        if valid_cost(f.cost):
            costs.append(f.cost)
        if f.outcome in ("transient", "guard_error") and not f.final:
            retries += 1
        elif f.outcome == "reply" and f.final is True and isinstance(f.generation_id, str) and f.generation_id:
            generations.setdefault(f.generation_id, set()).add(str(f.call_id))
    return attempts, retries, costs, generations, finals


def _totals(parts: list[_Part]) -> tuple[int, float, int, int, set[str]]:
    """(attempts, spend, retries, calls answered under a generation id another call also got,
    calls with a final line)."""
    # Spend is summed one attempt at a time, in log order, whoever read which part.
    spend = 0.0
    generations: dict[str, set[str]] = {}
    finals: set[str] = set()
    for _, _, costs, gens, part_finals in parts:
        finals |= part_finals
        for cost in costs:
            spend += cost
        for gen, cids in gens.items():
            generations.setdefault(gen, set()).update(cids)
    replayed = sum(len(cids) for cids in generations.values() if len(cids) > 1)
    return sum(p[0] for p in parts), spend, sum(p[1] for p in parts), replayed, finals


def _last_decision_raw_seq(folder: RunFolder) -> Any:
    line = last_line(folder, DECISIONS)
    if line is None:
        return None
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None   # a damaged line: `verify` names it
    return rec.get("raw_seq") if isinstance(rec, dict) else None


class _RawCounts:
    """The raw-log counts, read by two forked workers (each half of the log) when the log is
    large and a second CPU is there, while this process reads the decisions: a 1M-call raw
    log is GB, its decisions a few hundred MB."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self._workers = halves(folder, RAW, _raw_counts)

    def result(self) -> tuple[int, float, int, int, set[str]]:
        parts = [w.result() for w in self._workers]
        self._workers = []
        if not parts or any(p is None for p in parts):
            # Inline (small logs), or a worker failed or met a damaged line: read it here, so
            # that the error names the right line.
            return _totals([_raw_counts(self.folder)])
        return _totals(parts)

    def close(self) -> None:
        """Stop workers whose result was not collected (the decisions pass raised)."""
        for w in self._workers:
            w.stop()
        self._workers = []

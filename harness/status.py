"""`guardeval status`: counts read from the run files (no lock needed: append-only files).

One streaming pass over each log, the raw log in a worker when it is large. Raw lines carry
the whole request body (several KB each); status needs only `outcome`, `final` and
`usage.cost` of each, which `raw_fields` reads without parsing the body, and of a decision
only its call id, status and quarantine reason (`decision_fields`). Both fall back to a full
parse for any line not in the writer's shape, so the counts are exact; a line damaged only in
the middle (the fields status does not read) is not noticed here: `verify` is the check.
A 1,000,000-call run reports in seconds.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

from harness.errors import GuardevalError
from harness.store import (DECISIONS, EVENTS, RAW, decision_fields, is_cost, iter_jsonl, iter_lines, iter_raw_fields,
                           parse_line, read_manifest)


PARALLEL_MIN_BYTES = 64 << 20   # raw.jsonl size above which a worker reads it


def run_status(run_dir: Path) -> dict[str, Any]:
    manifest = read_manifest(run_dir)
    raw_counts = _RawCounts(run_dir / RAW)   # a worker reads the raw log while this reads decisions
    statuses: dict[str, int] = {}
    quarantine: dict[str, int] = {}
    decided: set[str] = set()   # distinct call ids: a call decided twice (a damaged log) counts once
    path = run_dir / DECISIONS
    for lineno, line in iter_lines(path):
        fields = decision_fields(line)
        if fields is None:
            rec = parse_line(line[:-1], path, lineno)
            fields = rec["call_id"], rec["status"], rec.get("quarantine_reason")
        cid, status, reason = fields
        decided.add(cid)
        statuses[status] = statuses.get(status, 0) + 1
        if reason:
            quarantine[reason] = quarantine.get(reason, 0) + 1
    attempts, spend, retries = raw_counts.result()
    last_stop = None
    events = run_dir / EVENTS
    if events.exists():
        for _, _, ev in iter_jsonl(events):
            if ev.get("event") == "stop":
                last_stop = {k: ev.get(k) for k in ("at", "reason", "fatal", "decided", "total")}
    n = manifest["n_calls"]
    return {
        "run_id": manifest["run_id"], "run_dir": str(run_dir), "guard": manifest["guard"]["name"],
        "model": manifest["guard"]["model"], "cohort": manifest["cohort"]["name"],
        "parent_run": (manifest.get("parent_run") or {}).get("run_id"),
        "n_calls": n, "decided": len(decided), "pending": n - len(decided), "complete": len(decided) >= n,
        "statuses": statuses, "quarantined": sum(quarantine.values()), "quarantine_by_reason": quarantine,
        "attempts": attempts, "retries": retries, "spend_usd": round(spend, 6), "last_stop": last_stop,
    }


def _raw_counts(path: Path) -> tuple[int, float, int]:
    """(attempts, spend, retries) over every complete line of raw.jsonl."""
    attempts, spend, retries = 0, 0.0, 0
    for _, _, _, f in iter_raw_fields(path):
        attempts += 1
        if is_cost(f.cost):
            spend += f.cost
        if f.outcome == "transient" and not f.final:
            retries += 1
    return attempts, spend, retries


class _RawCounts:
    """`_raw_counts` in a forked worker when the log is large and a second CPU is there: the
    raw log (GB) and the decisions (hundreds of MB) are then read at the same time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._proc: Any = None
        if path.exists() and path.stat().st_size >= PARALLEL_MIN_BYTES and len(os.sched_getaffinity(0)) > 1:
            ctx = multiprocessing.get_context("fork")
            self._conn, child = ctx.Pipe(duplex=False)
            self._proc = ctx.Process(target=_worker, args=(path, child), daemon=True)
            self._proc.start()
            child.close()

    def result(self) -> tuple[int, float, int]:
        if self._proc is None:
            return _raw_counts(self.path)
        try:
            outcome = self._conn.recv()
        except (EOFError, OSError):
            outcome = None
        finally:
            self._conn.close()
            self._proc.join()
        if isinstance(outcome, GuardevalError):
            raise outcome      # a damaged line: the same error as reading here
        return outcome if outcome is not None else _raw_counts(self.path)


def _worker(path: Path, conn: Any) -> None:
    try:
        conn.send(_raw_counts(path))
    except GuardevalError as exc:
        conn.send(exc)
    finally:
        conn.close()

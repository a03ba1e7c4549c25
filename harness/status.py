"""`guardeval status`: counts read from the run files (no lock needed: append-only files).

One streaming pass over each log. Raw lines carry the whole request body (several KB each);
status needs only `outcome`, `final` and `usage.cost` of each, which `raw_fields` reads
without parsing the body (exact: it falls back to a full parse for any line not in the
writer's shape). A 1,000,000-call run reports in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.store import DECISIONS, EVENTS, RAW, is_cost, iter_jsonl, raw_fields_or_parse, read_manifest


def run_status(run_dir: Path) -> dict[str, Any]:
    manifest = read_manifest(run_dir)
    statuses: dict[str, int] = {}
    quarantine: dict[str, int] = {}
    decided: set[str] = set()   # distinct call ids: a call decided twice (a damaged log) counts once
    for _, _, rec in iter_jsonl(run_dir / DECISIONS):
        decided.add(rec["call_id"])
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
        if rec.get("quarantine_reason"):
            quarantine[rec["quarantine_reason"]] = quarantine.get(rec["quarantine_reason"], 0) + 1
    attempts, spend, retries = _raw_counts(run_dir / RAW)
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
    with open(path, "rb", buffering=1 << 20) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.endswith(b"\n"):
                break  # a torn last line: not an attempt yet (resume moves it aside)
            f = raw_fields_or_parse(line, path, lineno)
            attempts += 1
            if is_cost(f.cost):
                spend += f.cost
            if f.outcome == "transient" and not f.final:
                retries += 1
    return attempts, spend, retries

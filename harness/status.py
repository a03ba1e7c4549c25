"""`guardeval status`: counts read from the run files (no lock needed: append-only files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.store import DECISIONS, EVENTS, RAW, iter_jsonl, read_manifest


def run_status(run_dir: Path) -> dict[str, Any]:
    manifest = read_manifest(run_dir)
    statuses: dict[str, int] = {}
    quarantine: dict[str, int] = {}
    decided: set[str] = set()
    for _, _, rec in iter_jsonl(run_dir / DECISIONS):
        decided.add(rec["call_id"])
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
        if rec.get("quarantine_reason"):
            quarantine[rec["quarantine_reason"]] = quarantine.get(rec["quarantine_reason"], 0) + 1
    attempts, spend, retries = 0, 0.0, 0
    for _, _, rec in iter_jsonl(run_dir / RAW):
        attempts += 1
        cost = (rec.get("usage") or {}).get("cost")
        if isinstance(cost, (int, float)):
            spend += cost
        if rec.get("outcome") == "transient" and not rec.get("final"):
            retries += 1
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

"""The names of a run folder's files (docs/design.md §6), the run id and the clock that stamps events."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

from guardeval.errors import InputError

GENESIS = "0" * 64
MANIFEST, SCHEDULE, STIMULI, RAW, DECISIONS, EVENTS, LOCK = (
    "manifest.json", "schedule.jsonl", "stimuli.jsonl", "raw.jsonl", "decisions.jsonl", "events.jsonl", ".lock")
COHORT_DIR, PROMPT_DIR = "cohort", "prompt"
# What `estimate`, `report`, `export` and `compare` write into a run folder (replaced, never followed).
REPORT_JSON, REPORT_MD, EFFECTS_PNG, REPORT_HTML = "report.json", "report.md", "effects.png", "report.html"
COMPARE_MD, COMPARE_HTML, COMPARE_PNG = "compare.md", "compare.html", "compare.png"
LEADERBOARD_PNG = "leaderboard.png"
PARTIAL_LOCK = ".partial-lock"
RUNS_ROOT = "runs"          # where a launch puts its run folder by default, and where a bare run id is looked up
_SAFE_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,64}")
RESUME_HINT = "Nothing half-written was kept: free some space, then `guardeval resume {run}`"


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(prefix: str) -> str:
    # The id names the run folder: a prefix from a config is checked here too, not trusted.
    if not _SAFE_PREFIX.fullmatch(prefix):
        raise InputError("a run id prefix must be 1-64 characters of A-Z a-z 0-9 . _ -", field="name")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{prefix}-{os.urandom(3).hex()}"


"""Replay detection by generation id: a check across calls, derived from the raw log.

OpenRouter gives every generation an id (`id` of the completion, `X-Generation-Id`) and does
not echo guardeval's `X-Call-Id`, so on a live run the per-line `replay_mismatch` check (an
echoed call id that names another call) never fires. The documented ground is the generation
id: two different calls whose final answers carry the same generation id were answered with
one generation (a cache or a proxy replaying an answer), and neither can be attributed to the
guard.

This needs every call's final answer at once, so it is not part of `decide` (a decision is a
function of its own raw line; decisions.jsonl stays re-derivable line by line, and a decision
written before the second call arrived could not know). It is derived here, from raw.jsonl
alone, wherever decisions are read: the estimator's run table and the call rows of `export` and
report.html (both calls are quarantined as `replay_mismatch`: `quarantine_reason`), `guardeval
status` (counted), and `guardeval audit providers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardeval.run.dispatch.decide import REPLAY_MISMATCH
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.lines import iter_raw_fields


def generation_replays(folder: RunFolder) -> dict[str, str]:
    """call id -> generation id, for every call whose final answer carries a generation id
    that another call's final answer carries too."""
    calls_of: dict[str, set[str]] = {}
    for _, _, _, f in iter_raw_fields(folder):
        gen = f.generation_id
        if f.outcome == "reply" and f.final is True and isinstance(gen, str) and gen and isinstance(f.call_id, str):
            calls_of.setdefault(gen, set()).add(f.call_id)
    return {cid: gen for gen, cids in calls_of.items() if len(cids) > 1 for cid in cids}


def quarantine_reason(decision: Mapping[str, Any] | None, replayed: Mapping[str, str]) -> str | None:
    """A decision's quarantine reason as every reader of decisions counts it: its own, else
    `replay_mismatch` when its call is in `replayed` (`generation_replays`); None without a decision."""
    if not decision:
        return None
    reason = decision.get("quarantine_reason")
    if reason is None and decision.get("call_id") in replayed:
        return REPLAY_MISMATCH
    return reason

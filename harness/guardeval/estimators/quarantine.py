"""Quarantine accounting (docs/design.md §10, seed 002): calls not attributable to the guard are
excluded from every estimate and counted by reason. Whether a report is publishable is the
`excluded` record's verdict (estimators/excluded.py): failed and quarantined calls together."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # estimators/types loads numpy; run/dispatch reads QUARANTINE_CODES from here
    from guardeval.estimators.types import Quarantine

# The codes `guardeval.run.dispatch.decide` writes into decisions.jsonl (same strings).
QUARANTINE_CODES = (
    "fingerprint_mismatch",   # sent body does not match the stimulus fixed at launch
    "provider_drift",         # resolved upstream differs from the pinned provider
    "provider_unknown",       # the answer does not say which upstream served it
    "length_truncation",      # the answer was cut off (finish_reason length)
    "replay_mismatch",        # resumed body differs, or a response answers another call (echoed id, generation id)
    "response_cache_hit",     # OpenRouter's response cache answered: a copy of an earlier generation
    "stimulus_mutated",       # a router pipeline stage (compression, guardrail, plugin, ...) may have altered it
)
# One limit for every call left out of the estimates, failed or quarantined, as a share of the
# scheduled calls (estimators/excluded.py's `excluded` record); past it a report is not publishable.
LIMIT = 0.02
THRESHOLD = LIMIT


def quarantine_summary(rows: Iterable[Mapping[str, Any]], n_scheduled: int) -> Quarantine:
    """{count, fraction, publishable, threshold, by_reason} over the scheduled calls."""
    by_reason = Counter(r["quarantine_reason"] for r in rows if r.get("quarantine_reason") is not None)
    count = sum(by_reason.values())
    fraction = count / n_scheduled if n_scheduled else 0.0
    return {
        "count": count,
        "fraction": fraction,
        "publishable": fraction <= THRESHOLD,
        "threshold": THRESHOLD,
        "by_reason": {code: by_reason.get(code, 0) for code in QUARANTINE_CODES},
    }

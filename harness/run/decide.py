"""Raw attempt record -> decision record. One pure function, used live and on recovery,
so a decision can always be re-derived from the raw log alone (docs/design.md §6, §10)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from guards.parsers import Parsed
from harness.run.records import Decision

# Quarantine codes (docs/design.md §10, seed 002): the call is not attributable to the guard.
FINGERPRINT_MISMATCH = "fingerprint_mismatch"
PROVIDER_DRIFT = "provider_drift"
LENGTH_TRUNCATION = "length_truncation"
REPLAY_MISMATCH = "replay_mismatch"
# No input-truncation code: the harness never cuts a prompt (one longer than the context is a
# `context_overflow` failure of the call, recorded as provider_error).
QUARANTINE_CODES = (FINGERPRINT_MISMATCH, PROVIDER_DRIFT, LENGTH_TRUNCATION, REPLAY_MISMATCH)


def provider_key(name: str | None) -> str:
    """'Anthropic' and 'anthropic' are one provider; compare letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", (name or "").lower())


def decide(raw: Mapping[str, Any], raw_line_sha256: str, *, expected_request_sha256: str | None,
           parser: Callable[[str | None, str | None], Parsed], pinned_provider: str | None) -> Decision:
    """The decision for a call whose final attempt is `raw` (a `RawLine`, or what `verify` read
    from one: a damaged line raises KeyError, TypeError or ValueError)."""
    outcome = raw.get("outcome")
    status: str
    decision: int | None = None
    score: float | None = None
    components: dict[str, Any] = {}
    quarantine: str | None = None
    detail: str | None = raw.get("error")
    if outcome == "not_sent":
        status, quarantine = "refused", REPLAY_MISMATCH
    elif outcome == "transient":
        status = "exhausted"
    elif outcome == "call_failed":
        status = "provider_error"
    elif outcome == "reply":
        if raw.get("finish_reason") == "content_filter":
            status, detail = "refused", "finish_reason content_filter"
        else:
            parsed = parser(raw.get("content"), raw.get("finish_reason"))
            status, decision, score, components = parsed.status, parsed.decision, parsed.score, parsed.components
            detail = parsed.detail
        if expected_request_sha256 is not None and raw.get("request_sha256") != expected_request_sha256:
            quarantine = FINGERPRINT_MISMATCH
        elif raw.get("answers_call_id") not in (None, raw["call_id"]):
            quarantine = REPLAY_MISMATCH
        elif pinned_provider and provider_key(raw.get("provider")) != provider_key(pinned_provider):
            quarantine = PROVIDER_DRIFT
        elif status == "truncated":
            quarantine = LENGTH_TRUNCATION
    else:
        raise ValueError(f"raw record {raw.get('seq')} has no final outcome ({outcome!r})")
    return {
        "call_id": raw["call_id"],
        "raw_seq": raw["seq"],
        "raw_line_sha256": raw_line_sha256,
        "status": status,
        "decision": decision,
        "score": score,
        "components": components,
        "attributable": quarantine is None and status in ("ok", "unparseable"),
        "quarantine_reason": quarantine,
        "detail": detail,
    }

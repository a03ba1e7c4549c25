"""Raw attempt record -> decision record. One pure function, used live and on recovery,
so a decision can always be re-derived from the raw log alone (docs/design.md §6, §10).

A decision depends on its own raw line only. The one check that needs more than one line —
two calls answered under the same generation id (`replay_mismatch` by generation id) — is
not written into decisions.jsonl; it is derived from the raw log wherever decisions are read
(`harness.run.replay`), so decisions.jsonl stays line-for-line re-derivable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from guards.openrouter import providers
from guards.openrouter.errors import REFUSED_PREFIX
from guards.parsers import Parsed

# Quarantine codes (docs/design.md §10, seed 002): the call is not attributable to the guard.
FINGERPRINT_MISMATCH = "fingerprint_mismatch"
PROVIDER_DRIFT = "provider_drift"
PROVIDER_UNKNOWN = "provider_unknown"
INPUT_TRUNCATION = "input_truncation"
LENGTH_TRUNCATION = "length_truncation"
REPLAY_MISMATCH = "replay_mismatch"
QUARANTINE_CODES = (FINGERPRINT_MISMATCH, PROVIDER_DRIFT, PROVIDER_UNKNOWN, INPUT_TRUNCATION, LENGTH_TRUNCATION,
                    REPLAY_MISMATCH)
# A transient failure that ran out of attempts because the provider kept failing inside its
# answer: a provider error, not merely an exhausted call.
_PROVIDER_FAILURES = frozenset({"choice_error"})


def provider_key(name: str | None) -> str:
    """'Anthropic' and 'anthropic' are one provider; compare letters and digits only."""
    return providers.key(name)


def decide(raw: dict[str, Any], raw_line_sha256: str, *, expected_request_sha256: str | None,
           parser: Callable[[str | None, str | None], Parsed],
           allowed_providers: Sequence[str] = ()) -> dict[str, Any]:
    """The decision for a call whose final attempt is `raw`. `allowed_providers`: the routing
    slugs the config pins (GuardConfig.allowed_providers); () checks nothing."""
    outcome = raw.get("outcome")
    status: str
    decision: int | None = None
    score: float | None = None
    components: dict[str, Any] = {}
    quarantine: str | None = None
    detail: str | None = raw.get("error")
    error_class = raw.get("error_class")
    if outcome == "not_sent":
        status, quarantine = "refused", REPLAY_MISMATCH
    elif outcome == "transient":
        status = "provider_error" if error_class in _PROVIDER_FAILURES else "exhausted"
    elif outcome == "call_failed":
        status = "refused" if isinstance(error_class, str) and error_class.startswith(REFUSED_PREFIX) \
            else "provider_error"
        if error_class == "input_truncation":
            quarantine = INPUT_TRUNCATION
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
        elif allowed_providers and raw.get("provider") is None:
            # OpenRouter's published response schema has no `provider` field: without it the
            # pin cannot be checked here (`guardeval audit providers` checks it afterwards).
            quarantine = PROVIDER_UNKNOWN
        elif allowed_providers and not providers.is_allowed(raw.get("provider"), allowed_providers):
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

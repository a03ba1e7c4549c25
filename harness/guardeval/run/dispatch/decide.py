"""Raw attempt record -> decision record. One pure function, used live and on recovery,
so a decision can always be re-derived from the raw log alone (docs/design.md §6, §10).

A decision depends on its own raw line only. The one check that needs more than one line —
two calls answered under the same generation id (`replay_mismatch` by generation id) — is
not written into decisions.jsonl; it is derived from the raw log wherever decisions are read
(`guardeval.run.integrity.replay`), so decisions.jsonl stays line-for-line re-derivable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from guardeval.backends.openrouter import providers, routing
from guardeval.backends.openrouter.errors import REFUSED_PREFIX
from guardeval.backends.parsers import Parsed
from guardeval.run.folder.records import Decision

# Quarantine codes (docs/design.md §10, seed 002): the call is not attributable to the guard.
FINGERPRINT_MISMATCH = "fingerprint_mismatch"
PROVIDER_DRIFT = "provider_drift"
PROVIDER_UNKNOWN = "provider_unknown"
LENGTH_TRUNCATION = "length_truncation"
REPLAY_MISMATCH = "replay_mismatch"
RESPONSE_CACHE_HIT = "response_cache_hit"    # OpenRouter's response cache answered (a copy of another generation)
STIMULUS_MUTATED = "stimulus_mutated"        # a router pipeline stage may have altered input or output
# No input-truncation code: the harness never cuts a prompt (one longer than the context is a
# `context_overflow` failure of the call, recorded as provider_error).
QUARANTINE_CODES = (FINGERPRINT_MISMATCH, PROVIDER_DRIFT, PROVIDER_UNKNOWN, LENGTH_TRUNCATION, REPLAY_MISMATCH,
                    RESPONSE_CACHE_HIT, STIMULUS_MUTATED)
# A transient failure that ran out of attempts because the provider kept failing inside its
# answer: a provider error, not merely an exhausted call.
_PROVIDER_FAILURES = frozenset({"choice_error"})


def provider_key(name: str | None) -> str:
    """'Anthropic' and 'anthropic' are one provider; compare letters and digits only."""
    return providers.key(name)


def decide(raw: Mapping[str, Any], raw_line_sha256: str, *, expected_request_sha256: str | None,
           parser: Callable[[str | None, str | None], Parsed],
           allowed_providers: Sequence[str] = ()) -> Decision:
    """The decision for a call whose final attempt is `raw` (a `RawLine`, or what `verify` read
    from one: a damaged line raises KeyError, TypeError or ValueError). `allowed_providers`: the
    routing slugs the config pins (GuardConfig.allowed_providers); () checks nothing."""
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
    elif outcome == "reply":
        if raw.get("finish_reason") == "content_filter":
            status, detail = "refused", "finish_reason content_filter"
        else:
            parsed = parser(raw.get("content"), raw.get("finish_reason"))
            status, decision, score, components = parsed.status, parsed.decision, parsed.score, parsed.components
            detail = parsed.detail
        quarantine, why = _quarantine(raw, status, expected_request_sha256, allowed_providers)
        if why is not None:
            detail = why
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


def _quarantine(raw: Mapping[str, Any], status: str, expected_request_sha256: str | None,
                allowed: Sequence[str]) -> tuple[str | None, str | None]:
    """(quarantine code, what it was: the decision's detail, or None to keep the parser's) of an
    answered call. The checks run in this order; the first that holds names the reason."""
    if expected_request_sha256 is not None and raw.get("request_sha256") != expected_request_sha256:
        return FINGERPRINT_MISMATCH, None
    if raw.get("answers_call_id") not in (None, raw["call_id"]):
        return REPLAY_MISMATCH, None
    hit, source = routing.cache_hit(raw.get("response_headers"), raw.get("usage"))
    if hit:
        return RESPONSE_CACHE_HIT, f"response cache hit: a replay of generation {source or '(source not named)'}"
    meta = raw.get("openrouter_metadata")
    stage = routing.mutating_stage(meta)
    if stage is not None:
        return STIMULUS_MUTATED, f"router pipeline stage {stage} may have altered the input or the output"
    if allowed:
        # The documented provider is router metadata's (selected endpoint, attempts); the
        # top-level `provider` (absent from OpenRouter's published schema) is the fallback. The
        # dispatcher stores the resolved one as `provider`; reading both again keeps this a
        # function of the raw line as written.
        served, _ = routing.served_by(meta, raw.get("provider"))
        if served is None:
            return PROVIDER_UNKNOWN, None     # `guardeval audit providers` checks it afterwards
        if not providers.is_allowed(served, allowed):
            return PROVIDER_DRIFT, f"answered by {served!r}, outside the pin ({', '.join(allowed)})"
        outside = routing.tried_outside(meta, lambda p: providers.is_allowed(p, allowed))
        if outside is not None:
            return PROVIDER_DRIFT, (f"answered by {served!r} after the router tried {outside!r}, outside the pin "
                                    f"({', '.join(allowed)})")
    if status == "truncated":
        return LENGTH_TRUNCATION, None
    return None, None

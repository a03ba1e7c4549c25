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

from guardeval.backends.backend import find_backend
from guardeval.backends.errors import REFUSED_PREFIX
from guardeval.backends.parsers import Parsed
from guardeval.backends.quarantine import (
    PROVIDER_DRIFT,
    PROVIDER_UNKNOWN,
    RESPONSE_CACHE_HIT,
    STIMULUS_MUTATED,
    QuarantineCheck,
    no_checks,
)
from guardeval.run.folder.records import Decision

# Quarantine codes (docs/design.md §10, seed 002): the call is not attributable to the guard.
# The back-ends' own (provider drift, cache hits, a mutating router stage) are in
# guardeval.backends.quarantine, raised by their checks (Backend.quarantine).
FINGERPRINT_MISMATCH = "fingerprint_mismatch"
LENGTH_TRUNCATION = "length_truncation"
REPLAY_MISMATCH = "replay_mismatch"
# No input-truncation code: the harness never cuts a prompt (one longer than the context is a
# `context_overflow` failure of the call, recorded as provider_error).
QUARANTINE_CODES = (FINGERPRINT_MISMATCH, PROVIDER_DRIFT, PROVIDER_UNKNOWN, LENGTH_TRUNCATION, REPLAY_MISMATCH,
                    RESPONSE_CACHE_HIT, STIMULUS_MUTATED)
# A transient failure that ran out of attempts because the provider kept failing inside its
# answer: a provider error, not merely an exhausted call.
_PROVIDER_FAILURES = frozenset({"choice_error"})


def decide(raw: Mapping[str, Any], raw_line_sha256: str, *, expected_request_sha256: str | None,
           parser: Callable[[str | None, str | None], Parsed], backend: str | None,
           allowed_providers: Sequence[str] = ()) -> Decision:
    """The decision for a call whose final attempt is `raw` (a `RawLine`, or what `verify` read
    from one: a damaged line raises KeyError, TypeError or ValueError). `backend`: the config's
    back-end, whose own quarantine checks run (None: none); `allowed_providers`: the routing slugs
    the config pins (GuardConfig.allowed_providers); () checks nothing."""
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
    elif outcome == "guard_error":
        # The guard's own failure (GuardError): its class kept with the message, for the causes
        # that launch and status count (guardeval.run.folder.causes).
        status, detail = "guard_error", f"{error_class}: {detail}"
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
        entry = find_backend(backend)
        quarantine, why = _quarantine(raw, status, expected_request_sha256, allowed_providers,
                                      entry.quarantine if entry is not None else no_checks)
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
                allowed: Sequence[str], own: QuarantineCheck) -> tuple[str | None, str | None]:
    """(quarantine code, what it was: the decision's detail, or None to keep the parser's) of an
    answered call. The checks run in this order; the first that holds names the reason."""
    if expected_request_sha256 is not None and raw.get("request_sha256") != expected_request_sha256:
        return FINGERPRINT_MISMATCH, None
    if raw.get("answers_call_id") not in (None, raw["call_id"]):
        return REPLAY_MISMATCH, None
    if (verdict := own(raw, allowed)) is not None:
        return verdict
    if status == "truncated":
        return LENGTH_TRUNCATION, None
    return None, None

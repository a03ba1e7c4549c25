"""One guard call run by Inspect -> guardeval's decision for it (docs/inspect.md).

The same function a run uses (`guardeval.run.dispatch.decide.decide`) turns the answer into a status and a
decision with the prompt's strict parser, so a call judged in Inspect and one judged by
`guardeval launch` are judged alike: a `finish_reason` of `length` is `truncated` and
quarantined (`length_truncation`), `content_filter` is `refused`, an answer to another stimulus
than the one exported is `fingerprint_mismatch`. What only Inspect knows is mapped before: a
sample error is a failed call (`provider_error`), a sample stopped by a limit with no answer is
`exhausted`, and an answer Inspect took from its own cache is quarantined as
`response_cache_hit` (a replay, not a repetition). Used by the exported task's scorer (for
Inspect's view) and by the log import (the decision guardeval estimates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from guardeval.backends.parsers import Parsed
from guardeval.backends.quarantine import RESPONSE_CACHE_HIT
from guardeval.inspect_logs import finish_reason
from guardeval.run.dispatch.decide import FINGERPRINT_MISMATCH, decide

DETAIL_LIMIT = 300


def _bounded(text: Any) -> str | None:
    if text is None:
        return None
    s = str(text)
    return s if len(s) <= DETAIL_LIMIT else s[:DETAIL_LIMIT - 3] + "..."


class Unanswered(TypedDict):
    """The decision fields of a call without a counted answer."""

    decision: None
    score: None
    components: dict[str, Any]
    quarantine_reason: None


class Verdict(TypedDict):
    """One Inspect sample as a call's decision: the fields of a decisions.jsonl line it has."""

    status: str
    decision: int | None
    score: float | None
    components: dict[str, Any]
    quarantine_reason: str | None
    detail: NotRequired[str | None]


def verdict(output: Any, parser: Callable[[str | None, str | None], Parsed], *, sample_error: Any = None,
            limit: Any = None, seen_sha256: str | None = None, expected_sha256: str | None = None,
            cache_read: bool = False) -> Verdict:
    """{status, decision, score, components, quarantine_reason, detail} of one sample (one call).

    `output`: the sample's ModelOutput (or None); `sample_error`: its EvalError; `limit`: its
    EvalSampleLimit; `seen_sha256`: `stimulus_sha256` of the input the model was sent;
    `expected_sha256`: the one exported (None: not checked); `cache_read`: Inspect's cache answered.
    """
    failed: Unanswered = {"decision": None, "score": None, "components": {}, "quarantine_reason": None}
    if sample_error is not None:
        return {**failed, "status": "provider_error", "detail": _bounded(getattr(sample_error, "message", sample_error))}
    choices = getattr(output, "choices", None) or []
    if output is None or not choices:
        if limit is not None:
            return {**failed, "status": "exhausted", "detail": _bounded(f"{limit.type} limit reached before an answer")}
        return {**failed, "status": "provider_error",
                "detail": _bounded(getattr(output, "error", None) or "no answer in the log")}
    if getattr(output, "error", None):
        return {**failed, "status": "provider_error", "detail": _bounded(output.error)}
    raw = {"outcome": "reply", "content": output.completion, "finish_reason": finish_reason(output.stop_reason),
           "call_id": "", "seq": 0, "request_sha256": seen_sha256}
    # No back-end's own checks: Inspect's model call is not a guardeval back-end's.
    d = decide(raw, "", expected_request_sha256=expected_sha256, parser=parser, backend=None)
    out: Verdict = {"status": d["status"], "decision": d["decision"], "score": d["score"], "components": d["components"],
                    "quarantine_reason": d["quarantine_reason"], "detail": d["detail"]}
    if out["quarantine_reason"] == FINGERPRINT_MISMATCH:
        out["detail"] = ("the log records no model call for it" if seen_sha256 is None else
                         "the model was sent another stimulus than the one exported for this sample")
    if cache_read and out["quarantine_reason"] is None:
        out["quarantine_reason"] = RESPONSE_CACHE_HIT
        out["detail"] = "answered from Inspect's cache: a replay of an earlier generation, not a repetition"
    out["detail"] = _bounded(out["detail"])
    return out

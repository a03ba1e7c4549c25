"""OpenRouter's answers -> guardeval's failure taxonomy (docs/design.md §7, the error-shape table).

Sources (field names and meanings; the wording here is ours):
- https://openrouter.ai/docs/api-reference/errors (and /docs/api/reference/errors-and-debugging):
  the error body `{"error": {"code", "message", "metadata"}}`; 400, 401, 402, 403 (insufficient
  permissions, guardrail block, or moderation flag; moderation metadata `reasons`,
  `flagged_input`), 408, 429, 502, 503; `Retry-After` on 429/503, and on a 402 whose
  `metadata.limit_source` is the in-flight spending budget (a 402 without it is not a
  wait-and-retry case); errors during generation come back as HTTP 200.
- https://openrouter.ai/docs/api-reference/overview: a non-streaming choice carries
  `finish_reason`, `native_finish_reason`, `message` and an optional `error` (`{code, message,
  metadata}`); `finish_reason` is `error` when the generation ended in an error.
- The same page, "Model availability errors": `error.availability` (guardeval.backends.openrouter.availability),
  judged before anything else here.
- The SDK references list OpenRouter's canonical error types (an open enum: `refusal`,
  `content_policy_violation`, `permission_denied`, `payload_too_large`,
  `context_length_exceeded`, ...). The pages found do not say where in a chat-completions error
  body that type travels, so it is looked for in `error.type`, a string `error.code`, and
  `error.metadata.error_type` / `error.metadata.type`.

Every function here is pure: it judges an answer that the transport has already read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guardeval.backends.base import Reply
from guardeval.backends.errors import (
    CONTEXT_RE,
    REFUSED_PREFIX,
    TRANSIENT_STATUS,
    AttemptError,
    CallFailed,
    FatalError,
    TransientError,
    error_object,
    message_of,
)
from guardeval.backends.openrouter import availability

REFUSAL_TYPES = frozenset({"content_policy_violation", "refusal"})
CONFIG_TYPES = frozenset({"permission_denied", "authentication", "payment_required", "not_found"})
# A 403 that names no type: only a message saying the input was blocked or flagged is a refusal
# of this call; anything else (a key without permission, say) stops the run.
_BLOCKED_RE = re.compile(r"\b(guardrail|moderation|prompt.injection|content.polic"
                         r"|(request|input|prompt|content|message)\b[^.]{0,20}\b(blocked|flagged))", re.IGNORECASE)


def error_type(err: Mapping[str, Any] | None) -> str | None:
    """OpenRouter's canonical error type, wherever the body carries it (see the module docstring)."""
    if not err:
        return None
    raw_meta = err.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    for value in (err.get("type"), err.get("code"), meta.get("error_type"), meta.get("type")):
        if isinstance(value, str) and value:
            return value.lower()
    return None


def _moderation_detail(err: Mapping[str, Any]) -> str | None:
    meta = err.get("metadata")
    if not isinstance(meta, dict):
        return None
    reasons, flagged = meta.get("reasons"), meta.get("flagged_input")
    if not isinstance(reasons, list) and not isinstance(flagged, str):
        return None
    shown = ", ".join(str(r)[:60] for r in reasons[:8]) if isinstance(reasons, list) else "unspecified"
    return f"moderation flagged the input ({shown})"


def classify_status(status: int, retry_after: float | None, text: str, reply: Reply) -> AttemptError:
    """An HTTP error status from OpenRouter -> the error to raise for this attempt."""
    err = error_object(text)
    av = availability.read(err)
    if av is not None:
        # Switch on `retryable`, not on the status or the code (guardeval.backends.openrouter.availability).
        text_msg = availability.message(status, av, message_of(text, err))
        if av.retryable:
            return TransientError(av.error_class, text_msg, reply,
                                  retry_after=av.retry_after if av.retry_after is not None else retry_after)
        return FatalError(av.error_class, text_msg, reply)
    etype = error_type(err)
    msg = f"HTTP {status}: {message_of(text, err)}"
    if status == 413 or etype == "payload_too_large":
        return CallFailed("request_too_large", msg, reply)
    if status in TRANSIENT_STATUS or status >= 500:
        return TransientError(f"http_{status}", msg, reply, retry_after=retry_after)
    if status == 402:
        # Out of credits: stop (resumable). The in-flight budget says when to come back.
        if retry_after is not None:
            return TransientError("http_402", msg, reply, retry_after=retry_after)
        return FatalError("http_402", msg, reply)
    if etype in REFUSAL_TYPES and status in (400, 403):
        return CallFailed(REFUSED_PREFIX + etype, msg, reply)
    if status == 403:
        if etype in CONFIG_TYPES:
            return FatalError("http_403", msg, reply)
        moderation = _moderation_detail(err) if err else None
        if moderation:
            return CallFailed(REFUSED_PREFIX + "moderation", f"HTTP 403: {moderation}", reply)
        if _BLOCKED_RE.search(message_of(text, err)):
            return CallFailed(REFUSED_PREFIX + "guardrail", msg, reply)
        return FatalError("http_403", msg, reply)
    if status == 400 and (etype == "context_length_exceeded" or CONTEXT_RE.search(text[:4096])):
        return CallFailed("context_overflow", msg, reply)
    return FatalError(f"http_{status}", msg, reply)


def check_choice(choice: Mapping[str, Any], reply: Reply) -> None:
    """A choice that ended in an error (HTTP 200): a provider failure, retried, never scored."""
    err = choice.get("error")
    if choice.get("finish_reason") == "error" or err is not None:
        what = message_of("", err if isinstance(err, dict) else {}) if err else "finish_reason error"
        code = err.get("code") if isinstance(err, dict) else None
        raise TransientError("choice_error", f"HTTP 200 with a choice that ended in an error"
                             f"{f' ({code})' if code is not None else ''}: {what}", reply)

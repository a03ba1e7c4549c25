"""The records of a run's two logs, as typed dictionaries (docs/design.md §6; docs/reference/run-folder.md).

`Attempt` is what the dispatcher records for one attempt; `RunWriter.append_raw` adds `seq`,
`prev_sha256` and the canonical `request` body, giving a `RawLine` of raw.jsonl. `Decision` is one
line of decisions.jsonl, derived from a call's final raw line alone (`guardeval.run.dispatch.decide`). Lines
read back from disk are data to be checked (`verify`), so readers take them as plain mappings.
"""

# No `from __future__ import annotations` here: TypedDict reads NotRequired from evaluated
# annotations (Python 3.11 would count string ones as required keys).
from typing import Any, NotRequired, TypedDict

from guardeval.backends.base import Usage


class Attempt(TypedDict):
    call_id: str
    attempt: int                    # 1, 2, ... per call, across sessions
    started: str                    # UTC, ISO 8601
    finished: str
    request_sha256: str             # of the body sent (canonical JSON, no secrets)
    status: int | str | None        # HTTP status, "local" for an in-process model, None when nothing came back
    response: str | None            # the body exactly as received (secrets redacted)
    response_sha256: str | None
    content: str | None
    finish_reason: str | None
    native_finish_reason: str | None  # the upstream's own finish reason (a router's)
    generation_id: str | None       # the answer's generation id (a router's): replays across calls
    error_class: str | None         # e.g. http_429, connection, timeout, malformed, context_overflow
    error: str | None
    latency_s: float
    usage: Usage                    # prompt_tokens, completion_tokens, total_tokens, cost (as reported)
    provider: str | None            # the upstream that answered (a router's)
    answers_call_id: str | None     # X-Call-Id echoed by the server
    outcome: str                    # reply, transient, guard_error, call_failed, not_sent
    final: bool                     # the call's last attempt
    seq: NotRequired[int]           # set once written
    redacted: NotRequired[bool]     # True on a line the API key was cut out of
    # A back-end's own fields, when the answer has them, are its record's `raw_fields`
    # (guardeval.backends.backend): a router's response headers, its metadata, earlier failed tries.
    response_headers: NotRequired[dict[str, str]]       # cache status / source id, generation id
    previous_errors: NotRequired[list[dict[str, Any]]]  # {provider, code, status} of earlier failed tries
    # python guards only, when the function printed: the first 2,048 characters of each stream
    # (stdout, stderr, redacted) and how many it wrote (stdout_chars, stderr_chars)
    guard_output: NotRequired[dict[str, Any]]


class RawLine(Attempt):
    """One line of raw.jsonl."""

    prev_sha256: str                # SHA-256 of the previous line's bytes: the chain
    request: dict[str, Any]         # the request body


class Supersedes(TypedDict):
    """The live decision a retried call's new decision replaces (`run/folder/supersede.Live.ref`)."""

    decision_sha256: str
    raw_seq: int
    status: str
    quarantine_reason: str | None


class Decision(TypedDict):
    """One line of decisions.jsonl."""

    call_id: str
    raw_seq: int
    raw_line_sha256: str
    status: str                     # ok, unparseable, truncated, provider_error, refused, exhausted, guard_error
    decision: int | None            # 1 block, 0 allow, None
    score: float | None
    components: dict[str, Any]
    attributable: bool
    quarantine_reason: str | None   # one of guardeval.run.dispatch.decide.QUARANTINE_CODES
    detail: str | None
    retry_round: NotRequired[int]           # a retried call's decision: 1, 2, ... (`resume --retry-failed`)
    supersedes: NotRequired[Supersedes]
